//! The words of a payment: its note, audience, action, status, kind, medium and
//! target type.
//! Each word is stored as its `as_str` text, and read back with `TryFrom<String>`,
//! which refuses any other text.

use std::fmt;

/// A payment's note: 1 to 500 characters after trimming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NoteError {
    #[error("note must not be empty")]
    Empty,
    #[error("note must be at most {} characters long", Note::MAX_CHARS)]
    TooLong,
}

impl Note {
    pub const MAX_CHARS: usize = 500;

    pub fn parse(input: &str) -> Result<Self, NoteError> {
        let trimmed = input.trim();
        match trimmed.chars().count() {
            0 => Err(NoteError::Empty),
            n if n > Self::MAX_CHARS => Err(NoteError::TooLong),
            _ => Ok(Self(trimmed.to_owned())),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Who may see a payment (SPEC §3); `private` unless asked otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Audience {
    Public,
    Friends,
    #[default]
    Private,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("audience must be public, friends or private")]
pub struct AudienceError;

impl Audience {
    pub const ALL: [Self; 3] = [Self::Public, Self::Friends, Self::Private];

    /// Any letter case is accepted.
    pub fn parse(input: &str) -> Result<Self, AudienceError> {
        match input.trim().to_ascii_lowercase().as_str() {
            "public" => Ok(Self::Public),
            "friends" => Ok(Self::Friends),
            "private" => Ok(Self::Private),
            _ => Err(AudienceError),
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Friends => "friends",
            Self::Private => "private",
        }
    }
}

/// Which way the money goes: the actor pays the target, or charges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentAction {
    Pay,
    Charge,
}

impl PaymentAction {
    pub const ALL: [Self; 2] = [Self::Pay, Self::Charge];

    pub fn parse(input: &str) -> Option<Self> {
        match input.trim().to_ascii_lowercase().as_str() {
            "pay" => Some(Self::Pay),
            "charge" => Some(Self::Charge),
            _ => None,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pay => "pay",
            Self::Charge => "charge",
        }
    }
}

/// Where a payment is in its life (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentStatus {
    Pending,
    Settled,
    Failed,
    Expired,
    Cancelled,
}

impl PaymentStatus {
    pub const ALL: [Self; 5] = [
        Self::Pending,
        Self::Settled,
        Self::Failed,
        Self::Expired,
        Self::Cancelled,
    ];

    pub fn parse(input: &str) -> Option<Self> {
        let input = input.trim().to_ascii_lowercase();
        Self::ALL.into_iter().find(|s| s.as_str() == input)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Settled => "settled",
            Self::Failed => "failed",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for PaymentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a payment was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    Api,
    Web,
}

impl Medium {
    pub const ALL: [Self; 2] = [Self::Api, Self::Web];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Web => "web",
        }
    }
}

/// A payment made by a user, or the refund that returns a held pay (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentKind {
    Payment,
    Refund,
}

impl PaymentKind {
    pub const ALL: [Self; 2] = [Self::Payment, Self::Refund];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Payment => "payment",
            Self::Refund => "refund",
        }
    }
}

/// How a payment's target was addressed: an account, or an address that may
/// become one's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetType {
    User,
    Email,
    Phone,
}

impl TargetType {
    pub const ALL: [Self; 3] = [Self::User, Self::Email, Self::Phone];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Email => "email",
            Self::Phone => "phone",
        }
    }
}

/// A stored word that is none of its type's (a row written by something else).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("'{word}' is not a payment {what}")]
pub struct UnknownWord {
    what: &'static str,
    word: String,
}

/// Reading a word back as stored: exactly one of `ALL`'s `as_str`.
macro_rules! stored_word {
    ($($word:ident: $what:literal),* $(,)?) => {$(
        impl $word {
            /// The word as stored: exactly one of `ALL`'s `as_str`, or `None`.
            pub fn from_stored(word: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|known| known.as_str() == word)
            }
        }

        impl TryFrom<String> for $word {
            type Error = UnknownWord;

            fn try_from(word: String) -> Result<Self, UnknownWord> {
                Self::from_stored(&word).ok_or(UnknownWord { what: $what, word })
            }
        }
    )*};
}

stored_word!(
    Audience: "audience",
    PaymentAction: "action",
    PaymentStatus: "status",
    PaymentKind: "kind",
    Medium: "medium",
    TargetType: "target type",
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_trimmed_and_bounded() {
        assert_eq!(Note::parse("  lunch ").map(|n| n.0), Ok("lunch".to_owned()));
        assert_eq!(Note::parse("   "), Err(NoteError::Empty));
        assert!(Note::parse(&"é".repeat(500)).is_ok());
        assert_eq!(Note::parse(&"x".repeat(501)), Err(NoteError::TooLong));
    }

    #[test]
    fn audiences_ignore_letter_case() {
        assert_eq!(Audience::parse("PUBLIC"), Ok(Audience::Public));
        assert_eq!(Audience::parse("Friends"), Ok(Audience::Friends));
        assert_eq!(Audience::parse("everyone"), Err(AudienceError));
    }

    #[test]
    fn stored_words_read_back_exactly() {
        for status in PaymentStatus::ALL {
            assert_eq!(
                PaymentStatus::try_from(status.as_str().to_owned()),
                Ok(status)
            );
        }
        assert_eq!(
            PaymentKind::try_from("refund".to_owned()),
            Ok(PaymentKind::Refund)
        );
        assert!(PaymentAction::try_from("Pay".to_owned()).is_err());
        assert!(Medium::try_from("fax".to_owned()).is_err());
    }
}
