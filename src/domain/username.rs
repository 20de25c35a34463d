use secrecy::{ExposeSecret, SecretString};

/// A username: 3 to 30 letters, digits, `_` or `-`, with at least one letter, so
/// that it can never be mistaken for a phone number or an e-mail at sign-in.
/// Unique regardless of letter case.
#[derive(Debug, Clone, PartialEq, Eq, derive_more::Display)]
pub struct Username(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UsernameError {
    #[error("username must be 3 to 30 characters long")]
    Length,
    #[error("username may contain only letters, digits, '_' and '-'")]
    Characters,
    #[error("username must contain at least one letter")]
    NoLetter,
}

impl Username {
    pub fn parse(input: &str) -> Result<Self, UsernameError> {
        let trimmed = input.trim();
        if !(3..=30).contains(&trimmed.chars().count()) {
            return Err(UsernameError::Length);
        }
        if !trimmed
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(UsernameError::Characters);
        }
        if !trimmed.chars().any(|c| c.is_ascii_alphabetic()) {
            return Err(UsernameError::NoLetter);
        }
        Ok(Self(trimmed.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A new password: 8 to 256 characters. Kept secret so it never reaches a log.
#[derive(Debug)]
pub struct Password(SecretString);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PasswordError {
    #[error("password must be at least 8 characters long")]
    TooShort,
    #[error("password must be at most 256 characters long")]
    TooLong,
}

impl Password {
    pub fn parse(input: &str) -> Result<Self, PasswordError> {
        match input.chars().count() {
            n if n < 8 => Err(PasswordError::TooShort),
            n if n > 256 => Err(PasswordError::TooLong),
            _ => Ok(Self(SecretString::from(input.to_owned()))),
        }
    }

    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_follow_the_rules() {
        assert!(Username::parse("ann_lee-2").is_ok());
        for (bad, error) in [
            ("ab", UsernameError::Length),
            ("a".repeat(31).as_str(), UsernameError::Length),
            ("ann lee", UsernameError::Characters),
            ("ann@x.org", UsernameError::Characters),
            ("2125550187", UsernameError::NoLetter),
        ] {
            assert_eq!(Username::parse(bad), Err(error), "{bad}");
        }
    }
}
