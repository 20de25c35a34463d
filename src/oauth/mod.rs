//! The authorization server: apps (clients) and their credentials, authorization
//! decisions, grants, tokens, and `introspect`, which the REST API links
//! against. Knows nothing of HTTP.

pub mod authorize;
pub mod client_auth;
pub mod clients;
pub mod credentials;
pub mod device;
pub mod grants;
pub mod id_token;
pub mod introspection_cache;
pub mod keys;
pub mod logout;
pub mod tokens;

pub use tokens::{introspect, ActiveToken, IntrospectError};

/// Declares the parameters of a request read from its (name, value) pairs (a
/// query string or a form): a struct whose first fields are the parameters it
/// reads, each named as the parameter and `None` until given, then its other
/// fields; and its `from_pairs`, which hands every pair, in the order sent, to
/// the struct's own `take` with the parameter's [`Field`] when it is one the
/// request reads (`take` decides what a repeat or a control character means).
macro_rules! request_params {
    ($(#[$meta:meta])* pub struct $name:ident reads [$($param:ident),+ $(,)?] {
        $($(#[$field_meta:meta])* $field_vis:vis $field:ident: $ty:ty,)*
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default)]
        pub struct $name {
            $(pub $param: Option<String>,)+
            $($(#[$field_meta])* $field_vis $field: $ty,)*
        }

        impl $name {
            /// Reads the parameters in the order sent; any other is ignored.
            pub fn from_pairs<K, V>(pairs: impl IntoIterator<Item = (K, V)>) -> Self
            where
                K: AsRef<str>,
                V: Into<String>,
            {
                const FIELDS: &[$crate::oauth::Field<$name>] =
                    &[$($crate::oauth::Field::new(stringify!($param), |p| &mut p.$param)),+];
                let mut params = Self::default();
                for (name, value) in pairs {
                    let name = name.as_ref();
                    let field = FIELDS.iter().find(|field| field.name == name);
                    params.take(name, value.into(), field);
                }
                params
            }
        }
    };
}

pub(crate) use request_params;

/// A parameter a request reads, and the field that holds it.
pub struct Field<P> {
    pub name: &'static str,
    pub slot: fn(&mut P) -> &mut Option<String>,
}

impl<P> Field<P> {
    pub const fn new(name: &'static str, slot: fn(&mut P) -> &mut Option<String>) -> Self {
        Self { name, slot }
    }
}
