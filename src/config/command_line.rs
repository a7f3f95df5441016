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

/// Why a command line cannot be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SplitError {
    UnclosedSingleQuote,
    UnclosedDoubleQuote,
    TrailingBackslash,
}

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
    let mut words = Vec::new();
    // `None` between words; `Some` once a word has begun (even an empty quoted one).
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => words.extend(word.take()),
            '\'' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        None => return Err(SplitError::UnclosedSingleQuote),
                        Some('\'') => break,
                        Some(other) => current.push(other),
                    }
                }
            }
            '"' => double_quoted(&mut chars, word.get_or_insert_with(String::new))?,
            '\\' => match chars.next() {
                None => return Err(SplitError::TrailingBackslash),
                Some('\n') => {}
                Some(other) => word.get_or_insert_with(String::new).push(other),
            },
            other => word.get_or_insert_with(String::new).push(other),
        }
    }
    words.extend(word);
    Ok(words)
}

/// The rest of a `"..."` part, after its opening quote.
fn double_quoted(chars: &mut std::str::Chars<'_>, current: &mut String) -> Result<(), SplitError> {
    loop {
        match chars.next() {
            None => return Err(SplitError::UnclosedDoubleQuote),
            Some('"') => return Ok(()),
            Some('\\') => match chars.next() {
                None => return Err(SplitError::UnclosedDoubleQuote),
                Some('\n') => {}
                Some(escaped @ ('"' | '\\' | '$' | '`')) => current.push(escaped),
                Some(other) => {
                    current.push('\\');
                    current.push(other);
                }
            },
            Some(other) => current.push(other),
        }
    }
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
}
