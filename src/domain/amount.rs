use rust_decimal::Decimal;
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

    pub fn parse(input: &str) -> Result<Self, AmountError> {
        let trimmed = input.trim();
        // Only plain decimal notation, `-?digits[.digits]`: no exponents, no
        // thousands separators, no bare `.5` or `5.`.
        let unsigned = trimmed.strip_prefix('-').unwrap_or(trimmed);
        let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        let plain = match unsigned.split_once('.') {
            Some((whole, fraction)) => digits(whole) && digits(fraction),
            None => digits(unsigned),
        };
        if !plain {
            return Err(AmountError::NotANumber);
        }
        // Far more digits than any amount has: refused before the decimal
        // arithmetic, which has a 28-digit ceiling.
        if unsigned.len() > 40 {
            return Err(AmountError::TooLarge(Self::MAX_ABS));
        }
        // `from_str_exact` refuses what it would otherwise round (digits past
        // its precision), so `5000.0000…01` is not taken for 5000.00.
        let value = Decimal::from_str_exact(trimmed).map_err(|e| match e {
            rust_decimal::Error::Underflow => AmountError::TooPrecise,
            _ => AmountError::TooLarge(Self::MAX_ABS),
        })?;
        Self::from_decimal(value)
    }

    /// Parses a JSON number literal, which may use an exponent (`1.25e2`).
    pub fn parse_json_number(literal: &str) -> Result<Self, AmountError> {
        if literal.contains(['e', 'E']) {
            Self::from_decimal(
                Decimal::from_scientific(literal).map_err(|_| AmountError::NotANumber)?,
            )
        } else {
            Self::parse(literal)
        }
    }

    /// The value is what counts, not how it is written: `7.000` is 7 dollars.
    fn from_decimal(value: Decimal) -> Result<Self, AmountError> {
        let value = value.normalize();
        if value.scale() > 2 {
            return Err(AmountError::TooPrecise);
        }
        if value.is_zero() {
            return Err(AmountError::Zero);
        }
        let cents = scaled_cents(value).ok_or(AmountError::TooLarge(Self::MAX_ABS))?;
        if cents.unsigned_abs() > Self::MAX_ABS.cents().unsigned_abs() {
            return Err(AmountError::TooLarge(Self::MAX_ABS));
        }
        Ok(Self(Money::from_cents(cents)))
    }

    /// Parses an amount that must be positive (a deposit, a pay).
    pub fn parse_positive(input: &str) -> Result<Self, AmountError> {
        let amount = Self::parse(input)?;
        if amount.0.cents() < 0 {
            return Err(AmountError::Negative);
        }
        Ok(amount)
    }

    pub fn money(self) -> Money {
        self.0
    }

    pub fn cents(self) -> i64 {
        self.0.cents()
    }
}

/// Exact cents of a decimal with at most two fractional digits; `None` when
/// they do not fit.
fn scaled_cents(value: Decimal) -> Option<i64> {
    let mut shifted = value.checked_mul(Decimal::ONE_HUNDRED)?;
    shifted.rescale(0);
    i64::try_from(shifted.mantissa()).ok()
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
        for (input, error) in [
            ("0.001", AmountError::TooPrecise),
            ("0", AmountError::Zero),
            ("0.00", AmountError::Zero),
            ("abc", AmountError::NotANumber),
            ("", AmountError::NotANumber),
            ("1e3", AmountError::NotANumber),
            ("1,000", AmountError::NotANumber),
            (".5", AmountError::NotANumber),
            ("5.", AmountError::NotANumber),
            ("+5", AmountError::NotANumber),
            ("--5", AmountError::NotANumber),
            ("NaN", AmountError::NotANumber),
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
        for huge in ["1e28", "7.9e26", "1e400"] {
            assert!(Amount::parse_json_number(huge).is_err(), "{huge}");
        }
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
