//! The MCP protocol revisions the gateway names itself. Any other revision a caller or a
//! server speaks passes through as text; only these are decided on or sent.

/// An MCP protocol revision (`YYYY-MM-DD`) the gateway names in its own requests or
/// decisions, oldest first (so `<` orders revisions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum McpRevision {
    /// The first published revision; `harpoon`'s `initialize` still accepts it, as the
    /// official client's does.
    V2024_11_05,
    /// The first revision of Streamable HTTP; `harpoon`'s `initialize` accepts it.
    V2025_03_26,
    /// What the gateway's own HTTP `initialize` asks for (`doctor`, `demo`), and what the
    /// embedded MCP stub answers when it is not asked for one.
    V2025_06_18,
    /// The latest revision with the `initialize` handshake: what a stdio session asks for
    /// by default ([`McpRevision::LATEST_WITH_INITIALIZE`]).
    V2025_11_25,
    /// No `initialize` handshake (a server is discovered, not initialized), no stream
    /// resumption, subscription streams.
    V2026_07_28,
}

impl McpRevision {
    /// Every revision, oldest first.
    pub const ALL: [Self; 5] = [
        Self::V2024_11_05,
        Self::V2025_03_26,
        Self::V2025_06_18,
        Self::V2025_11_25,
        Self::V2026_07_28,
    ];

    /// The latest revision with the `initialize` handshake; a stdio session's default.
    pub const LATEST_WITH_INITIALIZE: Self = Self::V2025_11_25;

    /// The first revision whose servers cannot resume a stream (and must not be asked to).
    pub const NO_RESUME_FROM: Self = Self::V2026_07_28;

    /// The revision as the wire writes it (`protocolVersion`, `Mcp-Protocol-Version`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::V2024_11_05 => "2024-11-05",
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// The revision the wire spelling `date` names, if it is one of these.
    pub fn parse(date: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == date)
    }
}

impl std::fmt::Display for McpRevision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_revision_is_its_wire_date_and_the_dates_sort_as_the_revisions() {
        assert_eq!(
            McpRevision::ALL.map(McpRevision::as_str),
            ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
        );
        for revision in McpRevision::ALL {
            assert_eq!(McpRevision::parse(revision.as_str()), Some(revision));
        }
        assert_eq!(McpRevision::parse("2025-06-19"), None);
        for pair in McpRevision::ALL.windows(2) {
            assert!(pair[0] < pair[1] && pair[0].as_str() < pair[1].as_str(), "{pair:?}");
        }
        for revision in McpRevision::ALL {
            assert!(super::super::is_protocol_revision(revision.as_str()), "{revision}");
            assert_eq!(revision.to_string(), revision.as_str());
        }
        assert_eq!(McpRevision::LATEST_WITH_INITIALIZE.as_str(), "2025-11-25");
        assert_eq!(McpRevision::NO_RESUME_FROM.as_str(), "2026-07-28");
    }
}
