//! The id map of one child (pure): which pipe-side id belongs to which caller's request.
//!
//! Callers' JSON-RPC ids (and progress tokens) may collide: commands come from different
//! MCP clients. So every request written to a child carries a pipe id minted here, unique
//! for that child's life, and its progress token (if it had one) is replaced by the same
//! number. The entry keeps the caller's own values, to give them back in what the child
//! sends, and the caller's key, so that a `notifications/cancelled` reaches only its own
//! caller's request.
//!
//! Invariants:
//! - a pipe id is minted once (a [`Ticket`] cannot be cloned) and entered at most once;
//!   an answer takes its entry out, so no request is answered twice;
//! - an entry is live from just before its write until its answer, its retirement
//!   (deadline passed, call dropped) or the end of the child ([`PendingMap::close`]);
//!   after `close` nothing enters, so a dead child's map answers nobody, and a new child
//!   has a map of its own: nothing written before a death is matched after it;
//! - retired entries are remembered in a ring of bounded size, to tell a late answer from
//!   an unknown id and to let a cancel reach a request the child may still be working on;
//!   the live entries are bounded by the channel's concurrency limit, outside this map.
//!
//! Nothing here does I/O, logs or counts; the waiter type `W` is whatever the transport
//! hands answers to.

use std::collections::{BTreeMap, VecDeque};

use super::rewrite::same_id;

/// A minted pipe id, not yet entered. Not `Clone`: an id is entered at most once.
#[derive(Debug)]
pub(super) struct Ticket(u64);

/// What the gateway keeps of a caller's request to give back its own values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Origin {
    /// The caller's JSON id, as its raw text (trimmed).
    pub(super) id: Box<str>,
    /// The caller's progress token as raw text, when its request carried one.
    pub(super) token: Option<Box<str>>,
    /// Who sent it (its `Mcp-Session-Id`), when known.
    pub(super) caller: Option<Box<str>>,
}

struct Entry<W> {
    origin: Origin,
    waiter: W,
}

/// A request retired before its answer came.
struct Retired {
    pipe: u64,
    id: Box<str>,
    caller: Option<Box<str>>,
}

/// Where an answer with a given pipe id goes.
#[derive(Debug)]
pub(super) enum Answer<W> {
    /// To the live request with that id (now out of the map).
    To { origin: Origin, waiter: W },
    /// Nowhere: its request was retired before the answer came.
    Late,
    /// Nowhere: no request of this child has (or recently had) that id.
    Unknown,
}

/// Which request of the child a caller's cancel names.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum CancelTarget {
    /// Exactly one request of that caller with that id: its pipe id.
    One(u64),
    /// None of that caller's requests on this child has that id (any more).
    Nothing,
    /// Several have it: whose it is cannot be told, so none is cancelled.
    Ambiguous,
}

/// The map is closed: its child ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Closed;

/// The id map of one child.
pub(super) struct PendingMap<W> {
    /// The last pipe id minted.
    last: u64,
    /// Live requests by pipe id: ascending ids are ascending ages.
    live: BTreeMap<u64, Entry<W>>,
    /// The latest retired requests, oldest first, at most `retired_cap`.
    retired: VecDeque<Retired>,
    retired_cap: usize,
    closed: bool,
}

impl Ticket {
    /// The pipe id (and token) this ticket stands for.
    pub(super) fn id(&self) -> u64 {
        self.0
    }
}

impl<W> PendingMap<W> {
    /// An empty map that remembers at most `retired_cap` retired requests.
    pub(super) fn new(retired_cap: usize) -> Self {
        Self {
            last: 0,
            live: BTreeMap::new(),
            retired: VecDeque::new(),
            retired_cap,
            closed: false,
        }
    }

    /// The next pipe id (never one minted before on this map).
    pub(super) fn mint(&mut self) -> Ticket {
        self.last += 1;
        Ticket(self.last)
    }

    /// Enters a request right before its write; refused once the child has ended.
    pub(super) fn enter(&mut self, ticket: Ticket, origin: Origin, waiter: W) -> Result<u64, Closed> {
        if self.closed {
            return Err(Closed);
        }
        let pipe = ticket.0;
        let previous = self.live.insert(pipe, Entry { origin, waiter });
        debug_assert!(previous.is_none(), "a ticket is entered once");
        Ok(pipe)
    }

    /// Where the answer carrying pipe id `pipe` goes; a live request leaves the map.
    pub(super) fn answer(&mut self, pipe: u64) -> Answer<W> {
        if let Some(entry) = self.live.remove(&pipe) {
            return Answer::To {
                origin: entry.origin,
                waiter: entry.waiter,
            };
        }
        match self.retired.iter().position(|r| r.pipe == pipe) {
            Some(i) => {
                self.retired.remove(i);
                Answer::Late
            }
            None => Answer::Unknown,
        }
    }

    /// The live request whose progress token on the pipe is `token`: its caller's own
    /// token and its waiter. `None` for a retired or unknown token, or a request that
    /// carried no token (the child made it up): such progress belongs to nobody.
    pub(super) fn progress(&self, token: u64) -> Option<(&str, &W)> {
        let entry = self.live.get(&token)?;
        Some((entry.origin.token.as_deref()?, &entry.waiter))
    }

    /// The oldest live request (messages not tied to any request go to it).
    pub(super) fn oldest(&self) -> Option<&W> {
        self.live.values().next().map(|e| &e.waiter)
    }

    /// The oldest live request whose origin passes `allowed` (a server request goes to
    /// the oldest caller that declared the capability it needs).
    pub(super) fn oldest_where(&self, allowed: impl Fn(&Origin) -> bool) -> Option<&W> {
        self.live.values().find(|e| allowed(&e.origin)).map(|e| &e.waiter)
    }

    /// The request's deadline passed, or its call was dropped, after its write: an answer
    /// that comes now is late. Nothing happens if it already left the map.
    pub(super) fn retire(&mut self, pipe: u64) {
        let Some(entry) = self.live.remove(&pipe) else {
            return;
        };
        if self.retired_cap == 0 {
            return;
        }
        if self.retired.len() == self.retired_cap {
            self.retired.pop_front();
        }
        self.retired.push_back(Retired {
            pipe,
            id: entry.origin.id,
            caller: entry.origin.caller,
        });
    }

    /// The request was entered but never written: it leaves without a trace.
    pub(super) fn forget(&mut self, pipe: u64) {
        self.live.remove(&pipe);
    }

    /// The request that `caller`'s cancel of its id `requested` (raw JSON) names, among
    /// the live and the retired ones (the child may still be working on those).
    pub(super) fn cancel_target(&self, requested: &str, caller: Option<&str>) -> CancelTarget {
        let live = self
            .live
            .iter()
            .filter(|(_, e)| e.origin.caller.as_deref() == caller && same_id(&e.origin.id, requested))
            .map(|(pipe, _)| *pipe);
        let retired = self
            .retired
            .iter()
            .filter(|r| r.caller.as_deref() == caller && same_id(&r.id, requested))
            .map(|r| r.pipe);
        let mut found = live.chain(retired);
        match (found.next(), found.next()) {
            (None, _) => CancelTarget::Nothing,
            (Some(pipe), None) => CancelTarget::One(pipe),
            (Some(_), Some(_)) => CancelTarget::Ambiguous,
        }
    }

    /// The child ended: every live request leaves (their waiters are returned, each
    /// once), and nothing enters any more.
    pub(super) fn close(&mut self) -> Vec<W> {
        self.closed = true;
        self.retired.clear();
        std::mem::take(&mut self.live).into_values().map(|e| e.waiter).collect()
    }

    #[cfg(test)]
    pub(super) fn is_closed(&self) -> bool {
        self.closed
    }

    /// Live requests (awaiting their answers).
    #[cfg(test)]
    pub(super) fn live_len(&self) -> usize {
        self.live.len()
    }

    /// Retired requests remembered.
    #[cfg(test)]
    pub(super) fn retired_len(&self) -> usize {
        self.retired.len()
    }
}

#[cfg(test)]
mod tests;
