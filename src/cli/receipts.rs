//! `tunnelgate receipts`: lists the delivery-receipt journal (docs/operations.md,
//! "Delivery receipts"), the rotated file included, newest last: a table, or the stored JSON lines.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use clap::{Args, ValueEnum};

use super::CliError;
use crate::receipts::{self, Filter, Listed, Unclean};

/// What `tunnelgate receipts --help` adds after the options.
pub(super) const RECEIPTS_HELP: &str = "\
One receipt per command that did not end cleanly: its downstream leg ended abandoned,
its terminal response ended not_found, rejected or ambiguous, it latched strict mode, or
a call the era bridge held for it ended with no caller told (unanswered).
Clean commands leave none. Never a payload, a header value or a token.

Examples:
  tunnelgate receipts --config /etc/tunnelgate/config.toml
  tunnelgate receipts --config config.toml --since 1h --outcome ambiguous
  tunnelgate receipts --path /var/lib/tunnelgate/receipts.jsonl --outcome not_found,rejected
  tunnelgate receipts --config config.toml --since 30m --json | jq -r .request_id

Exit codes: 0 listed (perhaps nothing), 1 the journal is missing or unreadable, 2 usage,
78 invalid configuration.";

#[derive(Args, Debug)]
pub(crate) struct ReceiptsArgs {
    /// Configuration file naming receipts.path (by default beside strict.latch_file); its
    /// secrets need not resolve here.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Journal file (instead of reading it from the configuration).
    #[arg(long, value_name = "FILE")]
    pub path: Option<PathBuf>,
    /// Only commands that finished within this long before now, e.g. "30m", "2h", "1day".
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub since: Option<Duration>,
    /// Only these outcomes: a leg that ended abandoned, a terminal delivery that ended
    /// not_found, rejected or ambiguous, or a held call that ended with no caller told
    /// (unanswered); repeat, or separate with commas.
    #[arg(long, value_name = "OUTCOME", value_enum, value_delimiter = ',')]
    pub outcome: Vec<OutcomeArg>,
    /// Print the stored JSON lines, one per receipt, instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `--outcome` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutcomeArg {
    Abandoned,
    #[value(name = "not_found")]
    NotFound,
    Rejected,
    Ambiguous,
    Unanswered,
}

impl OutcomeArg {
    fn unclean(self) -> Unclean {
        match self {
            Self::Abandoned => Unclean::Abandoned,
            Self::NotFound => Unclean::NotFound,
            Self::Rejected => Unclean::Rejected,
            Self::Ambiguous => Unclean::Ambiguous,
            Self::Unanswered => Unclean::Unanswered,
        }
    }
}

/// `tunnelgate receipts` over the journal at `path`.
pub(crate) fn receipts(path: &Path, args: &ReceiptsArgs) -> Result<u8, CliError> {
    let listing = receipts::read(path)?;
    let filter = Filter {
        since: args
            .since
            .map(|d| SystemTime::now().checked_sub(d).unwrap_or(SystemTime::UNIX_EPOCH)),
        outcomes: args.outcome.iter().map(|o| o.unclean()).collect(),
    };
    if listing.skipped > 0 {
        crate::stderr::line(format_args!(
            "{} line(s) of {} are not receipts and were skipped",
            listing.skipped,
            path.display()
        ));
    }
    let total = listing.receipts.len();
    let kept: Vec<&Listed> = listing.receipts.iter().filter(|l| filter.keeps(&l.receipt)).collect();
    if args.json {
        for listed in &kept {
            println!("{}", listed.line);
        }
    } else if kept.is_empty() {
        println!("no receipts match (of {total} in {})", path.display());
    } else {
        print!("{}", table(&kept));
        println!("{} of {total} receipts in {}", kept.len(), path.display());
    }
    Ok(0)
}

/// The receipts as an aligned table, one line each, the words of the caller last.
fn table(rows: &[&Listed]) -> String {
    const HEADER: [&str; 9] = [
        "FINISHED_AT",
        "REQUEST_ID",
        "CHANNEL",
        "METHOD",
        "LEG",
        "DELIVERY",
        "ATTEMPTS",
        "FATAL",
        "MESSAGE",
    ];
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|l| {
            let r = &l.receipt;
            [
                r.finished_at.clone(),
                r.request_id.clone(),
                r.channel.clone(),
                r.method.clone().unwrap_or_else(|| r.command_type.clone()),
                dash(&r.leg_outcome),
                dash(&r.delivery_outcome),
                r.attempts.to_string(),
                dash(&r.fatal_category),
                dash(&r.message),
            ]
        })
        .collect();
    let mut widths = HEADER.map(str::len);
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = HEADER.map(str::to_owned);
    for row in std::iter::once(&header).chain(&cells) {
        let line: Vec<String> = row.iter().zip(widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}
