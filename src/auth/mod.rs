//! Authentication rules without actix: password hashing, the sign-in throttle
//! and confirming a typed password under it, and the record of when a grant was
//! last used. The API's extractor (`api::principal`) and the pages call them.

pub mod factors;
pub mod passkeys;
pub mod password;
pub mod throttle;
pub mod usage;
