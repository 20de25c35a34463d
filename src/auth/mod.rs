//! Authentication rules without actix: password hashing and the record of when
//! a grant was last used. The API's extractor (`api::principal`) calls them.

pub mod password;
pub mod usage;
