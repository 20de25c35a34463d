//! Verification links and the limits on sending them.

/// Where a verification link was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Email,
    Phone,
}

impl Channel {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Phone => "phone",
        }
    }
}

#[derive(Debug, Clone)]
pub struct NewVerification {
    pub digest: String,
    pub user_id: String,
    pub channel: Channel,
    pub address: String,
    pub created_at: i64,
    pub expires_at: i64,
}

/// One count a verification send is held to: the key it is counted under
/// (an address, or a client IP) and that key's limits.
#[derive(Debug, Clone, Copy)]
pub struct SendCount<'a> {
    pub key: &'a str,
    pub limits: SendLimits,
}

/// The limits on verification links per key, in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct SendLimits {
    /// At most one send within this span.
    pub min_gap: i64,
    /// At most `per_window` sends within this span.
    pub window: i64,
    pub per_window: i64,
}
