use serde::{Serialize, Serializer};
use std::fmt;

/// A sum of money in integer cents. Signed, because balances of the ledger's
/// outside accounts and the charge amounts of the API are negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Money(i64);

impl Money {
    pub const fn from_cents(cents: i64) -> Self {
        Self(cents)
    }

    pub const fn cents(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        write!(f, "{sign}{}.{:02}", abs / 100, abs % 100)
    }
}

/// Written as a JSON number with two decimals (`12.50`), never a string and never
/// through a float.
impl Serialize for Money {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw = serde_json::value::RawValue::from_string(self.to_string())
            .map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AmountError {
    #[error("amount must be a decimal number of dollars, such as 12.50")]
    NotANumber,
    #[error("amount may have at most 2 decimal places")]
    TooPrecise,
    #[error("amount must not be zero")]
    Zero,
    #[error("amount must be positive")]
    Negative,
    #[error("amount must be at most {0}")]
    TooLarge(Money),
}

/// A nonzero amount of decimal dollars with at most two fractional digits, as
/// given by a client; kept as signed cents (a negative amount is a charge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amount(Money);

impl Amount {
    /// Largest absolute value any single amount may have; keeps every sum far
    /// from `i64` overflow.
    pub const MAX_ABS: Money = Money::from_cents(10_000_000_000);

    /// Parses decimal dollars written `-?digits[.digits]` (surrounding
    /// whitespace ignored): no exponent, no thousands separator, no bare `.5`
    /// or `5.`. Exact: the digits become cents by integer arithmetic, and what
    /// does not fit in cents is refused, never rounded.
    pub fn parse(input: &str) -> Result<Self, AmountError> {
        let trimmed = input.trim();
        let (negative, unsigned) = split_sign(trimmed);
        let (whole, fraction) = match unsigned.split_once('.') {
            Some((whole, fraction)) if all_digits(whole) && all_digits(fraction) => {
                (whole, fraction)
            }
            None if all_digits(unsigned) => (unsigned, ""),
            _ => return Err(AmountError::NotANumber),
        };
        Self::from_digits(negative, whole, fraction)
    }

    /// Parses a JSON number literal, which may use an exponent (`-2.5e0`).
    /// The decimal point is moved within the digits, so the value stays exact.
    pub fn parse_json_number(literal: &str) -> Result<Self, AmountError> {
        let Some((mantissa, exponent)) = literal.split_once(['e', 'E']) else {
            return Self::parse(literal);
        };
        let (negative, unsigned) = split_sign(mantissa);
        let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        let digits = format!("{whole}{fraction}");
        if !all_digits(&digits) {
            return Err(AmountError::NotANumber);
        }
        let exponent: i64 = match exponent.strip_prefix('+').unwrap_or(exponent).parse() {
            Ok(exponent) => exponent,
            // Beyond i64: unimaginably small or large.
            Err(_) if exponent.starts_with('-') => return Err(AmountError::TooPrecise),
            Err(_) => return Err(AmountError::TooLarge(Self::MAX_ABS)),
        };
        // The value is `significant` with the decimal point `point` digits
        // from its left (negative: zeros come first).
        let significant = digits.trim_start_matches('0');
        let leading_zeros = (digits.len() - significant.len()) as i64;
        let point = (whole.len() as i64 - leading_zeros).saturating_add(exponent);
        let significant = significant.trim_end_matches('0');
        if significant.is_empty() {
            return Err(AmountError::Zero);
        }
        let length = significant.len() as i64;
        if length.saturating_sub(point) > 2 {
            return Err(AmountError::TooPrecise);
        }
        if point > 15 {
            return Err(AmountError::TooLarge(Self::MAX_ABS));
        }
        // Now at most 2 digits follow the point and at most 15 precede it.
        let (whole, fraction) = if point <= 0 {
            let zeros = "0".repeat(usize::try_from(-point).unwrap_or(0));
            (String::new(), format!("{zeros}{significant}"))
        } else if point >= length {
            let zeros = "0".repeat(usize::try_from(point - length).unwrap_or(0));
            (format!("{significant}{zeros}"), String::new())
        } else {
            let (whole, fraction) = significant.split_at(usize::try_from(point).unwrap_or(0));
            (whole.to_owned(), fraction.to_owned())
        };
        Self::from_digits(negative, &whole, &fraction)
    }

    /// Cents from whole-dollar and fraction digits (either may be empty).
    fn from_digits(negative: bool, whole: &str, fraction: &str) -> Result<Self, AmountError> {
        let fraction = fraction.trim_end_matches('0');
        if fraction.len() > 2 {
            return Err(AmountError::TooPrecise);
        }
        let whole = whole.trim_start_matches('0');
        // Over 15 digits of dollars is past every bound (and past i64).
        if whole.len() > 15 {
            return Err(AmountError::TooLarge(Self::MAX_ABS));
        }
        let dollars: i64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| AmountError::NotANumber)?
        };
        let cents: i64 = format!("{fraction:0<2}")
            .parse()
            .map_err(|_| AmountError::NotANumber)?;
        let total = dollars * 100 + cents;
        if total == 0 {
            return Err(AmountError::Zero);
        }
        if total > Self::MAX_ABS.cents() {
            return Err(AmountError::TooLarge(Self::MAX_ABS));
        }
        Ok(Self(Money::from_cents(if negative {
            -total
        } else {
            total
        })))
    }

    /// Parses an amount that must be positive (a deposit, a pay).
    pub fn parse_positive(input: &str) -> Result<Self, AmountError> {
        let amount = Self::parse(input)?;
        if amount.0.cents() < 0 {
            return Err(AmountError::Negative);
        }
        Ok(amount)
    }

    /// The same sum the other way: a pay's amount as a charge's.
    pub fn negated(self) -> Self {
        Self(Money::from_cents(-self.0.cents()))
    }

    pub fn money(self) -> Money {
        self.0
    }

    pub fn cents(self) -> i64 {
        self.0.cents()
    }
}

fn split_sign(text: &str) -> (bool, &str) {
    match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    }
}

fn all_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_become_exact_cents() {
        for (input, cents) in [
            ("12.50", 1250),
            ("12.5", 1250),
            ("0.01", 1),
            ("5000", 500_000),
            ("-3.10", -310),
            ("7.000", 700),
            (" 1.99 ", 199),
        ] {
            assert_eq!(
                Amount::parse(input).map(Amount::cents),
                Ok(cents),
                "{input}"
            );
        }
    }

    #[test]
    fn bad_amounts_are_refused() {
        for input in ["abc", "", "1e3", "1,000", ".5", "5.", "+5", "--5", "NaN"] {
            assert_eq!(
                Amount::parse(input),
                Err(AmountError::NotANumber),
                "{input}"
            );
        }
        for (input, error) in [
            ("0.001", AmountError::TooPrecise),
            ("0", AmountError::Zero),
            ("0.00", AmountError::Zero),
            (
                "99999999999999999999",
                AmountError::TooLarge(Amount::MAX_ABS),
            ),
            // Past what 28-digit decimals can multiply by 100, and past what
            // they can hold at all: refused, never a panic.
            (
                "1000000000000000000000000000",
                AmountError::TooLarge(Amount::MAX_ABS),
            ),
            (
                "79228162514264337593543950335",
                AmountError::TooLarge(Amount::MAX_ABS),
            ),
            (
                "792281625142643375935439503350000",
                AmountError::TooLarge(Amount::MAX_ABS),
            ),
            (
                "9".repeat(5000).as_str(),
                AmountError::TooLarge(Amount::MAX_ABS),
            ),
            // Digits past the decimal precision are not rounded away.
            ("5000.0000000000000000000000000001", AmountError::TooPrecise),
            (
                "0.00999999999999999999999999999999",
                AmountError::TooPrecise,
            ),
        ] {
            assert_eq!(Amount::parse(input), Err(error), "{input}");
        }
        assert_eq!(Amount::parse_positive("-1"), Err(AmountError::Negative));
    }

    #[test]
    fn json_numbers_may_use_exponents() {
        for (literal, cents) in [("-1e1", -1000), ("1.25E2", 12500), ("-0.1e1", -100)] {
            assert_eq!(
                Amount::parse_json_number(literal).map(Amount::cents),
                Ok(cents),
                "{literal}"
            );
        }
        assert_eq!(
            Amount::parse_json_number("1e-3"),
            Err(AmountError::TooPrecise)
        );
        for huge in ["1e28", "7.9e26", "1e400", "1e99999999999999999999"] {
            assert_eq!(
                Amount::parse_json_number(huge),
                Err(AmountError::TooLarge(Amount::MAX_ABS)),
                "{huge}"
            );
        }
        // Exact: digits past the cents are refused, never rounded away.
        for too_precise in [
            "-5.000000000000000000000000000000001e3",
            "1.0000000000000000000000000000009e0",
            "0.0099999999999999999999999999999e0",
            "1e-99999999999999999999",
        ] {
            assert_eq!(
                Amount::parse_json_number(too_precise),
                Err(AmountError::TooPrecise),
                "{too_precise}"
            );
        }
        for (literal, cents) in [
            ("0.0000000000000000000000000000000000000000001e43", 100),
            ("1250e-2", 1250),
            ("0.5e1", 500),
            ("1E+2", 10000),
            ("-0.01e0", -1),
        ] {
            assert_eq!(
                Amount::parse_json_number(literal).map(Amount::cents),
                Ok(cents),
                "{literal}"
            );
        }
        assert_eq!(Amount::parse_json_number("0e5"), Err(AmountError::Zero));
    }

    #[test]
    fn money_is_written_with_two_decimals() {
        assert_eq!(Money::from_cents(1250).to_string(), "12.50");
        assert_eq!(Money::from_cents(-5).to_string(), "-0.05");
        #[derive(Serialize)]
        struct Wrapper {
            m: Money,
        }
        let json = serde_json::to_string(&Wrapper {
            m: Money::from_cents(100),
        });
        assert_eq!(json.ok().as_deref(), Some(r#"{"m":1.00}"#));
    }
}
