//! Storage of the device authorization grant (RFC 8628): a device's request,
//! the person's answer at `/device`, and the one poll that gets the tokens.
//! Codes are kept as SHA-256 digests only, like every credential.

/// Where a device code stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceStatus {
    /// Nobody has answered yet.
    Pending,
    /// The person allowed it: its grant is made, waiting for the device's poll.
    Allowed,
    /// The person denied it.
    Denied,
}

impl DeviceStatus {
    pub const ALL: [Self; 3] = [Self::Pending, Self::Allowed, Self::Denied];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Allowed => "allowed",
            Self::Denied => "denied",
        }
    }
}

impl TryFrom<String> for DeviceStatus {
    type Error = String;

    fn try_from(word: String) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|known| known.as_str() == word)
            .ok_or_else(|| format!("'{word}' is not a device code status"))
    }
}

/// A device's request, as `POST /oauth/device_authorization` stores it.
#[derive(Debug, Clone)]
pub struct NewDeviceCode {
    /// The digest of the device code, the device's credential.
    pub digest: String,
    /// The digest of the user code, what the person types at `/device`.
    pub user_code_digest: String,
    pub client_id: String,
    pub scopes: String,
    /// Seconds the device must wait between polls.
    pub interval_secs: i64,
    pub created_at: i64,
    pub expires_at: i64,
}

/// A pending device code, with what the consent page shows of its app.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PendingDeviceCode {
    pub client_id: String,
    pub scopes: String,
    pub expires_at: i64,
    pub app_name: String,
    pub app_description: String,
    pub site_url: Option<String>,
    pub app_suspended: bool,
}

/// A device code as a poll finds it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeviceCodeRow {
    pub client_id: String,
    pub status: DeviceStatus,
    /// The grant made when the person allowed it.
    pub grant_id: Option<String>,
    pub scopes: String,
    pub expires_at: i64,
    pub interval_secs: i64,
    pub last_polled_at: Option<i64>,
    /// When a poll got the tokens.
    pub used_at: Option<i64>,
}

/// Why a poll gets no tokens and nothing is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceRefusal {
    Denied,
    Expired,
}

/// What a poll does, as `oauth::device` decides it from the code's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceStep {
    /// Allowed and unspent: spend the code and store the tokens under its
    /// grant.
    Issue,
    /// Spent before: revoke its grant, and so the tokens it gave.
    RevokeReplayed,
    /// Still pending: record this poll, with the interval the device must
    /// keep from now on.
    RecordPoll { interval_secs: i64 },
    /// Nothing to write.
    Refuse(DeviceRefusal),
}

/// Decides a poll's step from the device code's row.
pub type DeviceDecide<'a> = &'a (dyn Fn(&DeviceCodeRow) -> DeviceStep + Send + Sync);

#[derive(Debug)]
pub enum DevicePoll {
    /// No such device code, or another client's (which leaves it untouched).
    Unknown,
    /// The code is spent and the tokens are stored under its grant, whose
    /// user this is.
    Issued { row: DeviceCodeRow, user_id: String },
    /// Allowed, but its grant was revoked before the poll: the code is spent
    /// and nothing is issued.
    GrantRevoked,
    /// Any other step `decide` chose for `row`, carried out.
    Stepped {
        row: DeviceCodeRow,
        step: DeviceStep,
    },
}
