//! Splitting a command line given as one string (the official client's `MCP_COMMAND`)
//! into an argv, with the quoting rules of a POSIX shell and nothing else.
//!
//! Rules: unquoted blanks (space, tab, newline) separate words; `'...'` keeps every
//! character inside as is; `"..."` keeps every character but `\`, which escapes `"`,
//! `\`, `$`, `` ` `` and a newline (and is kept before any other character); outside
//! quotes `\` makes the next character literal (`\` + newline joins lines); quoted and
//! unquoted parts next to each other form one word, and `''` or `""` alone is an empty
//! word. Nothing is expanded or interpreted: `$VAR`, `~`, globs, `;`, `|`, `&`, `<`, `>`
//! and `#` are ordinary characters, since no shell runs the command.
//!
//! The splitting is `shell_words::split`. Three things it does differently are made
//! good here: it starts a comment at an unquoted `#` that begins a word (so `#` is
//! hidden from it), it keeps a backslash that ends the line as a literal `\` (an error
//! here), and it has one error for either unclosed quote (two here).

use std::borrow::Cow;

/// Why a command line cannot be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SplitError {
    UnclosedSingleQuote,
    UnclosedDoubleQuote,
    TrailingBackslash,
}

/// Private-use characters that shell-words treats like letters, in every state: with
/// them `#` is spelled out of its sight, and back (see [`hide_hashes`]).
const ESCAPE: char = '\u{E000}';
const ESCAPED_ESCAPE: char = '\u{E001}';
const ESCAPED_HASH: char = '\u{E002}';

impl SplitError {
    pub(super) fn words(self) -> &'static str {
        match self {
            SplitError::UnclosedSingleQuote => "a single quote (') is not closed",
            SplitError::UnclosedDoubleQuote => "a double quote (\") is not closed",
            SplitError::TrailingBackslash => "it ends with a backslash that escapes nothing",
        }
    }
}

/// The words of `line`, as a shell would pass them to a program.
pub(super) fn split(line: &str) -> Result<Vec<String>, SplitError> {
    let hidden = hide_hashes(line);
    // One more `'` closes a single quote left open, and is a literal quote after a
    // backslash that escapes nothing; after an escaped backslash (`\\`) it opens a quote.
    let closes_with_a_quote = || shell_words::split(&format!("{hidden}'")).is_ok();
    match shell_words::split(&hidden) {
        Ok(_) if line.ends_with('\\') && closes_with_a_quote() => Err(SplitError::TrailingBackslash),
        Ok(words) => Ok(words.into_iter().map(show_hashes).collect()),
        Err(_) if closes_with_a_quote() => Err(SplitError::UnclosedSingleQuote),
        Err(_) => Err(SplitError::UnclosedDoubleQuote),
    }
}

/// `line` with each `#` as [`ESCAPE`] [`ESCAPED_HASH`] and each [`ESCAPE`] as
/// [`ESCAPE`] [`ESCAPED_ESCAPE`]: no `#` is left to start a comment, and every other
/// character is unchanged.
fn hide_hashes(line: &str) -> Cow<'_, str> {
    if !line.contains(['#', ESCAPE]) {
        return Cow::Borrowed(line);
    }
    let mut hidden = String::with_capacity(line.len() + 8);
    for c in line.chars() {
        match c {
            '#' => hidden.extend([ESCAPE, ESCAPED_HASH]),
            ESCAPE => hidden.extend([ESCAPE, ESCAPED_ESCAPE]),
            other => hidden.push(other),
        }
    }
    Cow::Owned(hidden)
}

/// One word back from [`hide_hashes`]' spelling. shell-words keeps ordinary characters
/// in order and puts nothing between two of them, so each [`ESCAPE`] is still followed
/// by the character that says what it stands for.
fn show_hashes(word: String) -> String {
    if !word.contains(ESCAPE) {
        return word;
    }
    let mut shown = String::with_capacity(word.len());
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        match c {
            ESCAPE if chars.next() == Some(ESCAPED_HASH) => shown.push('#'),
            ESCAPE => shown.push(ESCAPE),
            other => shown.push(other),
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_split_as_a_shell_splits_them() {
        let table: &[(&str, &[&str])] = &[
            ("node server.js", &["node", "server.js"]),
            ("  node\tserver.js \n", &["node", "server.js"]),
            (
                r#""/opt/my server/bin" --flag 'a b'"#,
                &["/opt/my server/bin", "--flag", "a b"],
            ),
            (r"/opt/my\ server/bin x", &["/opt/my server/bin", "x"]),
            (r#"a"b c"d"#, &["ab cd"]),
            (r#"'it''s'"#, &["its"]),
            (r#"'it'\''s'"#, &["it's"]),
            (r#"'' x """#, &["", "x", ""]),
            (r#""say \"hi\" \$HOME \\ \n""#, &[r#"say "hi" $HOME \ \n"#]),
            (r"'no \escapes $here'", &[r"no \escapes $here"]),
            ("$HOME ~ *.js a;b a|b #c", &["$HOME", "~", "*.js", "a;b", "a|b", "#c"]),
            ("one\\\ntwo", &["onetwo"]),
            ("", &[]),
            ("   ", &[]),
            ("日本 'ü x'", &["日本", "ü x"]),
        ];
        for (line, want) in table {
            let got = split(line).unwrap_or_else(|e| panic!("{line:?}: {e:?}"));
            assert_eq!(got, *want, "{line:?}");
        }
    }

    #[test]
    fn unbalanced_quotes_and_a_trailing_backslash_are_errors() {
        let table = [
            ("node 'server.js", SplitError::UnclosedSingleQuote),
            ("node \"server.js", SplitError::UnclosedDoubleQuote),
            ("node \"a\\", SplitError::UnclosedDoubleQuote),
            ("node server.js\\", SplitError::TrailingBackslash),
        ];
        for (line, want) in table {
            assert_eq!(split(line), Err(want), "{line:?}");
        }
    }

    #[test]
    fn hashes_are_ordinary_characters_wherever_they_stand() {
        let table: &[(&str, &[&str])] = &[
            ("# not a comment", &["#", "not", "a", "comment"]),
            ("a#b #", &["a#b", "#"]),
            (r##"\#x "#" '#' "\#" '\#'"##, &["#x", "#", "#", r"\#", r"\#"]),
            ("x\n#y", &["x", "#y"]),
            // The characters that spell `#` out of shell-words' sight stand for themselves.
            (
                "\u{E000}#\u{E001} \u{E002}\u{E000}",
                &["\u{E000}#\u{E001}", "\u{E002}\u{E000}"],
            ),
            ("'\u{E000}' \u{E000}\u{E002}", &["\u{E000}", "\u{E000}\u{E002}"]),
        ];
        for (line, want) in table {
            let got = split(line).unwrap_or_else(|e| panic!("{line:?}: {e:?}"));
            assert_eq!(got, *want, "{line:?}");
        }
    }

    #[test]
    fn a_final_backslash_is_an_error_only_when_it_escapes_nothing() {
        assert_eq!(split(r"a\\"), Ok(vec![r"a\".to_owned()]));
        assert_eq!(split(r"'a\' \\"), Ok(vec![r"a\".to_owned(), r"\".to_owned()]));
        let table = [
            (r"\", SplitError::TrailingBackslash),
            (r"'a'\", SplitError::TrailingBackslash),
            (r"a\\\", SplitError::TrailingBackslash),
            (r"# \", SplitError::TrailingBackslash),
            (r"'a\", SplitError::UnclosedSingleQuote),
            (r#""a'"#, SplitError::UnclosedDoubleQuote),
            (r#"'a"'"b"#, SplitError::UnclosedDoubleQuote),
            (r#""a"'b"#, SplitError::UnclosedSingleQuote),
        ];
        for (line, want) in table {
            assert_eq!(split(line), Err(want), "{line:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_argv_quoted_by_shell_words_comes_back_whole(
            argv in proptest::collection::vec("[a #'\"\\\\$`\t\n\u{E000}-\u{E002}ü]{0,8}", 0..5),
        ) {
            let line = shell_words::join(&argv);
            proptest::prop_assert_eq!(split(&line), Ok(argv));
        }
    }
}
