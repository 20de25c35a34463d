//! The migrations are embedded by `sqlx::migrate!`, which cargo does not know
//! reads them: without this, a new migration file alone would not rebuild.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
