//! The line reader and classifier as the fuzz and property targets drive them
//! (`crate::fuzzing::stdio_lines`): test and fuzz builds only.
//!
//! Uses the line module's API alone (`LineReader::new`, `next_line`, `classify`), over an
//! in-memory pipe that hands out at most `chunk` bytes per read, so line ends and the
//! length bound fall at every position of the reader's buffer.

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, ReadBuf};

use super::line::{classify, Line, LineReader};

/// One line as the reader returned it, with its classification.
#[derive(Debug)]
pub(crate) struct ProbedLine {
    /// What the reader kept of the line (at most the bound).
    pub(crate) bytes: Vec<u8>,
    /// The line's full length, without its `\n`.
    pub(crate) len: usize,
    pub(crate) overflow: bool,
    pub(crate) class: LineClass,
}

/// [`Line`] without its payload: what kind of line it was, and the raw JSON kept.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LineClass {
    Response { id: Option<String>, raw: String },
    Message(String),
    Blank,
    Invalid,
}

/// A pipe that is always ready and hands out at most `chunk` bytes per read.
struct Trickle<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl AsyncRead for Trickle<'_> {
    fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let n = self.chunk.min(self.data.len()).min(buf.remaining());
        let (head, rest) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = rest;
        Poll::Ready(Ok(()))
    }
}

/// Reads every line of `input` with a reader bounded at `max` bytes per line.
///
/// # Panics
/// If the reader waits on a pipe that is always ready, or fails on one that cannot fail.
pub(crate) fn read_all(input: &[u8], max: usize, keep_prefix: bool, chunk: usize) -> Vec<ProbedLine> {
    let pipe = Trickle {
        data: input,
        chunk: chunk.max(1),
    };
    let mut reader = LineReader::new(pipe, max, keep_prefix);
    let mut lines = Vec::new();
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        let next = pin!(reader.next_line()).poll(&mut cx);
        let Poll::Ready(read) = next else {
            panic!("the line reader waited on a pipe that is always ready");
        };
        let Some(line) = read.expect("an in-memory pipe cannot fail") else {
            return lines;
        };
        let class = match classify(line.bytes.clone()) {
            Line::Response { id, raw } => LineClass::Response {
                id: id.and_then(|span| raw.get().get(span).map(str::to_owned)),
                raw: raw.get().to_owned(),
            },
            Line::Message { raw, .. } => LineClass::Message(raw.get().to_owned()),
            Line::Blank => LineClass::Blank,
            Line::Invalid => LineClass::Invalid,
        };
        lines.push(ProbedLine {
            bytes: line.bytes,
            len: line.len,
            overflow: line.overflow,
            class,
        });
    }
}
