//! Fatal categories and their exit codes (API: supervisors and scripts depend on them).

use serde::{Deserialize, Serialize};

use crate::telemetry::{label_enum, FatalCategoryLabel};

label_enum! {
    /// Why a strict gateway latched. Each has a stable exit code; its label is used in
    /// metrics, the status JSON and the latch file (the serde name is the same).
    #[derive(Hash, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum FatalCategory {
        AckTimeout => "ack_timeout",
        AckConnectionLost => "ack_connection_lost",
        AckNotFound => "ack_not_found",
        AckRejected => "ack_rejected",
        AckRetriesExhausted => "ack_retries_exhausted",
        DeadlineExpired => "deadline_expired",
        StoppedBeforeAck => "stopped_before_ack",
        DownstreamAmbiguous => "downstream_ambiguous",
        InternalError => "internal_error",
        LatchedPreviously => "latched_previously",
        InterruptedBeforeAck => "interrupted_before_ack",
        LocalExhaustion => "local_exhaustion",
    }
}

impl FatalCategory {
    /// The process exit code for this category.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::AckTimeout => 80,
            Self::AckConnectionLost => 81,
            Self::AckNotFound => 82,
            Self::AckRejected => 83,
            Self::AckRetriesExhausted => 84,
            Self::DeadlineExpired => 85,
            Self::StoppedBeforeAck => 86,
            Self::DownstreamAmbiguous => 87,
            Self::InternalError => 88,
            Self::LatchedPreviously => 89,
            Self::InterruptedBeforeAck => 90,
            Self::LocalExhaustion => 91,
        }
    }

    /// What the operator should know, one sentence, no identifiers.
    pub fn explanation(self) -> &'static str {
        match self {
            Self::AckTimeout => {
                "the terminal response POST timed out on every attempt; the caller may not have its result"
            }
            Self::AckConnectionLost => {
                "the connection to the control plane was lost after the terminal response may have been written"
            }
            Self::AckNotFound => {
                "the control plane answered 404 to the terminal response; it may or may not have accepted it"
            }
            Self::AckRejected => "the control plane rejected the terminal response with a final status",
            Self::AckRetriesExhausted => {
                "the control plane kept answering retryable statuses until the attempt budget ran out"
            }
            Self::DeadlineExpired => "the command's response_timeout passed after it reached the MCP server",
            Self::StoppedBeforeAck => "the gateway stopped while a dispatched command was not yet acknowledged",
            Self::DownstreamAmbiguous => "the MCP server may have acted but no terminal response arrived",
            Self::InternalError => "an internal failure happened after a command reached the MCP server",
            Self::LatchedPreviously => "a fatal latch from an earlier run is still in place",
            Self::InterruptedBeforeAck => {
                "an earlier run ended after dispatching this command and before its acknowledgement"
            }
            Self::LocalExhaustion => {
                "too many open files in the gateway (or no socket memory): the terminal response could not be sent after the command reached the MCP server"
            }
        }
    }
}

/// `fatal_latches_total{category}` and `fatal_info{category}`.
impl FatalCategoryLabel for FatalCategory {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_the_documented_ones_and_distinct() {
        let codes: Vec<u8> = FatalCategory::ALL.iter().map(|c| c.exit_code()).collect();
        assert_eq!(codes, (80..=91).collect::<Vec<u8>>());
    }

    #[test]
    fn labels_round_trip_through_serde() {
        for c in FatalCategory::ALL {
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<FatalCategory>(&json).unwrap(), c);
        }
    }
}
