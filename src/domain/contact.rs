use std::str::FromStr;

/// An e-mail address, validated by `email_address` and kept in lower case so that
/// uniqueness and look-ups ignore letter case.
#[derive(Debug, Clone, PartialEq, Eq, Hash, derive_more::Display)]
pub struct Email(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("'{0}' is not a valid e-mail address")]
pub struct EmailError(String);

impl Email {
    pub fn parse(input: &str) -> Result<Self, EmailError> {
        let trimmed = input.trim();
        let parsed = email_address::EmailAddress::from_str(trimmed)
            .map_err(|_| EmailError(trimmed.to_owned()))?;
        // Display names ("Ann <ann@x.org>") are not addresses.
        if parsed.email() != trimmed || !parsed.domain().contains('.') {
            return Err(EmailError(trimmed.to_owned()));
        }
        Ok(Self(trimmed.to_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A phone number valid under the North American numbering plan, kept as E.164
/// (`+1XXXXXXXXXX`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, derive_more::Display)]
pub struct Phone(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("'{0}' is not a valid US phone number")]
pub struct PhoneError(String);

impl Phone {
    pub fn parse(input: &str) -> Result<Self, PhoneError> {
        let trimmed = input.trim();
        let invalid = || PhoneError(trimmed.to_owned());
        let number = phonenumber::parse(Some(phonenumber::country::Id::US), trimmed)
            .map_err(|_| invalid())?;
        if number.code().value() != 1 || !phonenumber::is_valid(&number) {
            return Err(invalid());
        }
        // A payment goes to a line, not an extension; and libphonenumber's US
        // patterns let through N11 exchanges (211, 411, 911…), which NANP
        // reserves for services and never assigns to a subscriber.
        let national = number.national().value().to_string();
        if number.extension().is_some() || national.get(4..6) == Some("11") {
            return Err(invalid());
        }
        Ok(Self(
            number.format().mode(phonenumber::Mode::E164).to_string(),
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails_are_validated_and_lowercased() {
        assert_eq!(
            Email::parse(" Ann.Lee@Example.ORG ").map(|e| e.0),
            Ok("ann.lee@example.org".to_owned())
        );
        for bad in [
            "",
            "ann",
            "ann@",
            "@example.org",
            "ann@@x.org",
            "Ann <ann@x.org>",
            "ann@localhost",
        ] {
            assert!(Email::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn us_phones_in_any_usual_format_become_e164() {
        for input in [
            "(212) 555-0187",
            "212-555-0187",
            "212.555.0187",
            "+1 212 555 0187",
            "12125550187",
            "2125550187",
        ] {
            assert_eq!(
                Phone::parse(input).map(|p| p.0),
                Ok("+12125550187".to_owned()),
                "{input}"
            );
        }
        for bad in [
            "",
            "555-0187",
            "123",
            "+44 20 7946 0958",
            "(012) 555-0187",
            "phone",
            "212-911-0187",
            "212-411-0187",
            "2125550187 ext 5",
        ] {
            assert!(Phone::parse(bad).is_err(), "{bad}");
        }
    }
}
