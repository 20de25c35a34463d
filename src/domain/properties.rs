//! Property tests for every parser that reads user input: none panics on any
//! input, and where a value has a written form, writing it and reading it back
//! gives the same value (and parsing is stable: a parsed value re-parses to
//! itself).

use super::*;
use proptest::prelude::*;

/// Arbitrary text, with the characters parsers care about over-represented.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[ -~]{0,80}",
        "[-+0-9.eE ,_]{0,40}",
        "[a-zA-Z0-9@._+ \\-\u{0}\u{7f}\u{85}\u{200b}]{0,40}",
        "(https?|ftp)://[a-z0-9.:@\\[\\]#?/=&%-]{0,40}",
        "[0-9T:Z.+ -]{0,40}",
    ]
}

/// A parsed value re-parses to itself from its stored form (`as_str`) and from
/// its written form (`Display`).
fn reparses_to_itself<T, E>(
    value: T,
    stored: &str,
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<(), TestCaseError>
where
    T: PartialEq + std::fmt::Debug + std::fmt::Display,
{
    let (from_stored, from_written) = (parse(stored).ok(), parse(&value.to_string()).ok());
    prop_assert_eq!(from_stored.as_ref(), Some(&value));
    prop_assert_eq!(from_written, Some(value));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn amounts_never_panic(input in text()) {
        let _ = Amount::parse(&input);
        let _ = Amount::parse_json_number(&input);
        let _ = Amount::parse_positive(&input);
    }

    #[test]
    fn an_amount_written_reads_back_as_itself(
        cents in -Amount::MAX_ABS.cents()..=Amount::MAX_ABS.cents()
    ) {
        prop_assume!(cents != 0);
        let written = Money::from_cents(cents).to_string();
        prop_assert_eq!(Amount::parse(&written).map(Amount::cents), Ok(cents));
        prop_assert_eq!(Amount::parse_json_number(&written).map(Amount::cents), Ok(cents));
    }

    #[test]
    fn an_amount_beyond_the_bound_is_refused_not_wrapped(
        cents in Amount::MAX_ABS.cents() + 1..i64::MAX
    ) {
        let written = Money::from_cents(cents).to_string();
        prop_assert_eq!(Amount::parse(&written), Err(AmountError::TooLarge(Amount::MAX_ABS)));
    }

    #[test]
    fn emails_never_panic_and_reparse_to_themselves(input in text()) {
        if let Ok(email) = Email::parse(&input) {
            reparses_to_itself(email.clone(), email.as_str(), Email::parse)?;
        }
    }

    #[test]
    fn an_email_address_reads_back(local in "[a-z0-9][a-z0-9._+-]{0,20}", domain in "[a-z][a-z0-9-]{0,15}\\.[a-z]{2,6}") {
        let address = format!("{local}@{domain}");
        if let Ok(email) = Email::parse(&address.to_uppercase()) {
            prop_assert_eq!(email.as_str(), address.to_lowercase());
        }
    }

    #[test]
    fn phones_never_panic_and_reparse_to_themselves(input in text()) {
        if let Ok(phone) = Phone::parse(&input) {
            reparses_to_itself(phone.clone(), phone.as_str(), Phone::parse)?;
        }
    }

    #[test]
    fn a_phone_in_any_usual_format_is_one_number(area in "[2-9][0-8][0-9]", exchange in "[2-9][0-9]{2}", line in "[0-9]{4}") {
        let forms = [
            format!("{area}{exchange}{line}"),
            format!("({area}) {exchange}-{line}"),
            format!("+1 {area}-{exchange}-{line}"),
            format!("1.{area}.{exchange}.{line}"),
        ];
        let parsed: Vec<_> = forms.iter().map(|f| Phone::parse(f).ok()).collect();
        if let Some(Some(first)) = parsed.first() {
            prop_assert_eq!(first.as_str(), format!("+1{area}{exchange}{line}"));
            for other in &parsed {
                prop_assert_eq!(other.as_ref(), Some(first));
            }
        }
    }

    #[test]
    fn datetimes_never_panic(input in text()) {
        let _ = parse_datetime(&input);
    }

    #[test]
    fn a_datetime_written_reads_back(micros in 0i64..253_402_300_799_000_000) {
        prop_assert_eq!(parse_datetime(&format_datetime_exact(micros)), Ok(micros));
        let whole = micros - micros.rem_euclid(1_000_000);
        prop_assert_eq!(parse_datetime(&format_datetime(micros)), Ok(whole));
    }

    #[test]
    fn redirect_urls_never_panic_and_reparse_to_themselves(input in text()) {
        if let Ok(url) = RedirectUrl::parse(&input) {
            reparses_to_itself(url.clone(), url.as_str(), RedirectUrl::parse)?;
        }
    }

    #[test]
    fn scopes_never_panic_and_reparse_to_themselves(input in text()) {
        let _ = Scope::parse(&input);
        if let Ok(scopes) = ScopeSet::parse(&input) {
            prop_assert_eq!(ScopeSet::parse(&scopes.to_string()), Ok(scopes));
        }
    }

    #[test]
    fn any_set_of_scopes_reads_back(picks in proptest::collection::vec(0usize..Scope::ALL.len(), 1..8)) {
        let scopes = ScopeSet::from_scopes(picks.iter().map(|&i| Scope::ALL[i]));
        prop_assert_eq!(ScopeSet::parse(&scopes.to_string()), Ok(scopes));
    }

    #[test]
    fn usernames_and_passwords_never_panic(input in text()) {
        if let Ok(name) = Username::parse(&input) {
            reparses_to_itself(name.clone(), name.as_str(), Username::parse)?;
        }
        if let Ok(password) = Password::parse(&input) {
            prop_assert_eq!(password.expose(), input.as_str());
        }
    }

    #[test]
    fn notes_never_panic_and_reparse_to_themselves(input in text()) {
        if let Ok(note) = Note::parse(&input) {
            prop_assert_eq!(Note::parse(note.as_str()), Ok(note));
        }
        let _ = has_forbidden_control(&input, Lines::Single);
        let _ = has_forbidden_control(&input, Lines::Multi);
    }

    #[test]
    fn payment_words_never_panic(input in text()) {
        if let Ok(audience) = Audience::parse(&input) {
            prop_assert_eq!(Audience::parse(audience.as_str()), Ok(audience));
        }
        if let Some(action) = PaymentAction::parse(&input) {
            prop_assert_eq!(PaymentAction::parse(action.as_str()), Some(action));
        }
        if let Some(status) = PaymentStatus::parse(&input) {
            prop_assert_eq!(PaymentStatus::parse(status.as_str()), Some(status));
        }
    }
}

#[test]
fn every_scope_and_payment_word_reads_back() {
    for scope in Scope::ALL {
        assert_eq!(Scope::parse(scope.as_str()), Some(scope));
    }
    for status in PaymentStatus::ALL {
        assert_eq!(PaymentStatus::parse(status.as_str()), Some(status));
    }
}
