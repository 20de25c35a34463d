//! The events an app's webhook endpoints may subscribe to (SPEC §12).

use super::PaymentStatus;

/// An event's type, as its `type` field and `--events` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    PaymentCreated,
    PaymentSettled,
    PaymentCancelled,
    PaymentFailed,
    PaymentExpired,
    GrantRevoked,
}

/// The type of the test event the Developer tab sends (to one endpoint,
/// whatever it subscribes to).
pub const TEST_EVENT: &str = "webhook.test";

impl EventType {
    pub const ALL: [Self; 6] = [
        Self::PaymentCreated,
        Self::PaymentSettled,
        Self::PaymentCancelled,
        Self::PaymentFailed,
        Self::PaymentExpired,
        Self::GrantRevoked,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::PaymentCreated => "payment.created",
            Self::PaymentSettled => "payment.settled",
            Self::PaymentCancelled => "payment.cancelled",
            Self::PaymentFailed => "payment.failed",
            Self::PaymentExpired => "payment.expired",
            Self::GrantRevoked => "grant.revoked",
        }
    }

    pub fn parse(input: &str) -> Option<Self> {
        let input = input.trim().to_ascii_lowercase();
        Self::ALL.into_iter().find(|e| e.as_str() == input)
    }

    /// The event of a payment reaching `status`: none for `pending`, which a
    /// payment only starts in (`payment.created`).
    pub const fn of_status(status: PaymentStatus) -> Option<Self> {
        match status {
            PaymentStatus::Pending => None,
            PaymentStatus::Settled => Some(Self::PaymentSettled),
            PaymentStatus::Failed => Some(Self::PaymentFailed),
            PaymentStatus::Expired => Some(Self::PaymentExpired),
            PaymentStatus::Cancelled => Some(Self::PaymentCancelled),
        }
    }
}

/// The events an endpoint wants: every one, or those named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventFilter {
    All,
    Only(Vec<EventType>),
}

/// An event name that is not one of [`EventType`]'s.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown event '{0}' (known: payment.created, payment.settled, payment.cancelled, payment.failed, payment.expired, grant.revoked)")]
pub struct UnknownEvent(pub String);

impl EventFilter {
    /// A comma-separated list of event names; empty or absent: every event.
    pub fn parse(list: Option<&str>) -> Result<Self, UnknownEvent> {
        let Some(list) = list.filter(|l| !l.trim().is_empty()) else {
            return Ok(Self::All);
        };
        let mut events = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let event = EventType::parse(name).ok_or_else(|| UnknownEvent(name.to_owned()))?;
            if !events.contains(&event) {
                events.push(event);
            }
        }
        if events.is_empty() {
            return Ok(Self::All);
        }
        events.sort_by_key(|e| EventType::ALL.iter().position(|a| a == e));
        Ok(Self::Only(events))
    }

    /// As stored: `*`, or `,a,b,` (a comma around each name, so that one
    /// `LIKE '%,name,%'` finds a name).
    pub fn stored(&self) -> String {
        match self {
            Self::All => "*".to_owned(),
            Self::Only(events) => {
                let names: Vec<&str> = events.iter().map(|e| e.as_str()).collect();
                format!(",{},", names.join(","))
            }
        }
    }

    /// What `stored` wrote; unknown names are left out.
    pub fn from_stored(stored: &str) -> Self {
        if stored.trim() == "*" {
            return Self::All;
        }
        Self::Only(stored.split(',').filter_map(EventType::parse).collect())
    }

    /// The names, every one for `All`.
    pub fn names(&self) -> Vec<&'static str> {
        match self {
            Self::All => EventType::ALL.iter().map(|e| e.as_str()).collect(),
            Self::Only(events) => events.iter().map(|e| e.as_str()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_events_is_parsed_stored_and_read_back() -> Result<(), UnknownEvent> {
        let filter = EventFilter::parse(Some("payment.settled, payment.created"))?;
        assert_eq!(filter.stored(), ",payment.created,payment.settled,");
        assert_eq!(EventFilter::from_stored(&filter.stored()), filter);
        assert_eq!(EventFilter::parse(None)?, EventFilter::All);
        assert_eq!(EventFilter::parse(Some(""))?.stored(), "*");
        assert!(EventFilter::parse(Some("payment.created,payment.refunded")).is_err());
        Ok(())
    }
}
