/// A new opaque id: a UUIDv7 in its 32-hex-digit form. Ids sort in creation
/// order, which keyset paging by id relies on.
pub fn new_id() -> String {
    uuid::Uuid::now_v7().simple().to_string()
}
