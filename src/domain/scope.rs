use std::collections::BTreeSet;
use std::fmt;

/// What a token lets an app do (SPEC §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    MakePayments,
    AccessProfile,
    AccessBalance,
    AccessEmail,
    AccessPhone,
    AccessFriends,
    AccessPaymentHistory,
    /// Accepted for old clients; grants nothing yet.
    AccessFeed,
    /// OpenID Connect (SPEC §10): signs the user in to the app (an ID token
    /// and `/oauth/userinfo`).
    OpenId,
    /// OpenID Connect's profile claims at `/oauth/userinfo`.
    Profile,
    /// OpenID Connect's `email` claims (a verified address only).
    Email,
    /// OpenID Connect's `phone_number` claims (a verified number only).
    Phone,
}

impl Scope {
    pub const ALL: [Scope; 12] = [
        Scope::MakePayments,
        Scope::AccessProfile,
        Scope::AccessBalance,
        Scope::AccessEmail,
        Scope::AccessPhone,
        Scope::AccessFriends,
        Scope::AccessPaymentHistory,
        Scope::AccessFeed,
        Scope::OpenId,
        Scope::Profile,
        Scope::Email,
        Scope::Phone,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::MakePayments => "make_payments",
            Scope::AccessProfile => "access_profile",
            Scope::AccessBalance => "access_balance",
            Scope::AccessEmail => "access_email",
            Scope::AccessPhone => "access_phone",
            Scope::AccessFriends => "access_friends",
            Scope::AccessPaymentHistory => "access_payment_history",
            Scope::AccessFeed => "access_feed",
            Scope::OpenId => "openid",
            Scope::Profile => "profile",
            Scope::Email => "email",
            Scope::Phone => "phone",
        }
    }

    /// SPEC §6: whether a personal access token gets this scope. The match
    /// names every scope, so a new one cannot reach such tokens unless it is
    /// decided here.
    pub const fn personal(self) -> bool {
        match self {
            Scope::MakePayments
            | Scope::AccessProfile
            | Scope::AccessBalance
            | Scope::AccessEmail
            | Scope::AccessPhone
            | Scope::AccessFriends => true,
            Scope::AccessPaymentHistory
            | Scope::AccessFeed
            | Scope::OpenId
            | Scope::Profile
            | Scope::Email
            | Scope::Phone => false,
        }
    }

    /// What the consent page says the scope allows.
    pub const fn description(self) -> &'static str {
        match self {
            Scope::MakePayments => {
                "Make payments and charges for you, and approve, deny or cancel payment requests"
            }
            Scope::AccessProfile => "See your profile and your payment history",
            Scope::AccessBalance => "See your balance",
            Scope::AccessEmail => "See your e-mail address",
            Scope::AccessPhone => "See your phone number",
            Scope::AccessFriends => "See your friends list",
            Scope::AccessPaymentHistory => "See your payment history",
            Scope::AccessFeed => "See your feed (grants nothing yet)",
            Scope::OpenId => "Sign you in with your Tally account (it learns your account id)",
            Scope::Profile => "See your name, username and profile picture",
            Scope::Email => "See your e-mail address, once you have verified it",
            Scope::Phone => "See your phone number, once you have verified it",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A non-empty set of scopes. Written space-separated in a fixed order, so equal
/// sets have equal text (consent is remembered per exact set).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScopeSet(BTreeSet<Scope>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScopeError {
    #[error("scope is required")]
    Empty,
    #[error("unknown scope: {0}")]
    Unknown(String),
}

impl ScopeSet {
    /// Parses scopes separated by spaces, `+` or commas.
    pub fn parse(input: &str) -> Result<Self, ScopeError> {
        let mut set = BTreeSet::new();
        for name in input
            .split(|c: char| c == ' ' || c == '+' || c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
        {
            set.insert(Scope::parse(name).ok_or_else(|| ScopeError::Unknown(name.to_owned()))?);
        }
        if set.is_empty() {
            return Err(ScopeError::Empty);
        }
        Ok(Self(set))
    }

    pub fn from_scopes(scopes: impl IntoIterator<Item = Scope>) -> Self {
        Self(scopes.into_iter().collect())
    }

    pub fn contains(&self, scope: Scope) -> bool {
        self.0.contains(&scope)
    }

    pub fn iter(&self) -> impl Iterator<Item = Scope> + '_ {
        self.0.iter().copied()
    }

    pub fn is_subset(&self, other: &ScopeSet) -> bool {
        self.0.is_subset(&other.0)
    }
}

impl fmt::Display for ScopeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|s| s.as_str()).collect();
        f.write_str(&names.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_separated_by_spaces_plus_signs_or_commas() {
        for input in [
            "make_payments access_profile",
            "access_profile+make_payments",
            "make_payments,access_profile",
            " access_profile , make_payments ",
        ] {
            assert_eq!(
                ScopeSet::parse(input).map(|s| s.to_string()),
                Ok("make_payments access_profile".to_owned()),
                "{input}"
            );
        }
        assert_eq!(ScopeSet::parse(""), Err(ScopeError::Empty));
        assert_eq!(
            ScopeSet::parse("access_profile root"),
            Err(ScopeError::Unknown("root".into()))
        );
    }
}
