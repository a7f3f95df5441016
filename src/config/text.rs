//! The read-only string views shared by the configuration's validated text newtypes
//! ([`TunnelId`](super::TunnelId), [`ChannelName`](super::ChannelName)).
//!
//! Invariant: a view never hands out `&mut`, so a value keeps the rules it was parsed
//! with. `Debug` prints the text as a `String` would, so a `Config`'s `Debug` output is
//! the same as when these fields were plain strings.

/// Implements `as_str`, `Deref<Target = str>`, `AsRef<str>`, `Display`, `Debug` and
/// comparisons with `str` for a newtype, given how to reach its text.
macro_rules! str_views {
    ($name:ident, |$this:ident| $text:expr) => {
        impl $name {
            /// The text, as validated.
            pub fn as_str(&self) -> &str {
                let $this = self;
                $text
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                self.as_str()
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(self.as_str(), f)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}

pub(super) use str_views;
