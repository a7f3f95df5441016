//! A watch stream: newline-separated JSON messages on one long HTTP response.

use std::fmt;

use super::wire::{self, WatchMessage};
use super::{EtcdError, WatchEvent};
use tunnelgate_egress::client::Answer;

/// The changes to a key (or a prefix) as etcd reports them, batch by batch.
///
/// It ends (`None`) when the stream ends: etcd stopped, the connection closed, or after
/// an error was returned. Nothing notices a stream that merely goes quiet (a frozen etcd):
/// the lease keep-alives of the coordination layer do.
pub struct Watch {
    /// `None` once the stream ended or failed.
    response: Option<Answer>,
    /// Bytes of the message not yet complete.
    buf: Vec<u8>,
    endpoint: String,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("endpoint", &self.endpoint)
            .field("open", &self.response.is_some())
            .finish()
    }
}

impl Watch {
    pub(super) fn new(response: Answer, endpoint: String) -> Watch {
        Watch {
            response: Some(response),
            buf: Vec::new(),
            endpoint,
        }
    }

    /// Waits for etcd's "created" message (an error if etcd canceled the watch instead).
    pub(super) async fn created(&mut self) -> Result<(), EtcdError> {
        match self.message().await {
            Some(Ok(WatchMessage::Created)) => Ok(()),
            Some(Ok(_)) => Err(EtcdError::Decode {
                reason: "the watch stream did not begin with its creation".to_owned(),
            }),
            Some(Err(e)) => Err(e),
            None => Err(EtcdError::Unreachable {
                endpoint: self.endpoint.clone(),
                reason: "the watch stream ended before etcd registered the watch".to_owned(),
            }),
        }
    }

    /// The next batch of changes, in revision order; `None` when the stream has ended.
    /// A canceled watch (compacted start revision, refused token) or a broken stream is
    /// one `Some(Err(..))`, then `None`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: bytes read so far stay in the watch, and no batch is lost when the
    /// future is dropped.
    pub async fn next(&mut self) -> Option<Result<Vec<WatchEvent>, EtcdError>> {
        loop {
            match self.message().await? {
                Ok(WatchMessage::Events(events)) => return Some(Ok(events)),
                Ok(WatchMessage::Created | WatchMessage::Progress) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// The next message; cancel-safe (the only `.await` is a chunk read).
    async fn message(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        loop {
            if let Some(line) = self.take_line() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let message = wire::watch_message(&line);
                if message.is_err() {
                    self.end();
                }
                return Some(message);
            }
            let response = self.response.as_mut()?;
            match response.chunk().await {
                Ok(Some(chunk)) => self.buf.extend_from_slice(&chunk),
                Ok(None) => return self.ended(),
                Err(_) => {
                    self.end();
                    return Some(Err(EtcdError::Unreachable {
                        endpoint: self.endpoint.clone(),
                        reason: "the watch stream broke (connection lost)".to_owned(),
                    }));
                }
            }
        }
    }

    /// The stream's clean end: `None`, or an error for a message cut off by it.
    fn ended(&mut self) -> Option<Result<WatchMessage, EtcdError>> {
        let cut = self.buf.iter().any(|b| !b.is_ascii_whitespace());
        self.end();
        cut.then(|| {
            Err(EtcdError::Decode {
                reason: "the watch stream ended in the middle of a message".to_owned(),
            })
        })
    }

    fn end(&mut self) {
        self.response = None;
        self.buf.clear();
    }

    /// One complete line (without its newline), if the buffer holds one.
    fn take_line(&mut self) -> Option<Vec<u8>> {
        let at = self.buf.iter().position(|&b| b == b'\n')?;
        let mut line: Vec<u8> = self.buf.drain(..=at).collect();
        line.pop();
        Some(line)
    }
}
