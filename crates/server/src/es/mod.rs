//! The Elasticsearch API: the handshake, index administration, `_bulk` and single
//! documents, searches (the query DSL, several indices, points in time and scrolls),
//! and the wire shapes they share.

pub(crate) mod admin;
pub mod bulk;
pub mod documents;
pub mod dsl;
pub mod handshake;
pub mod multi;
pub(crate) mod pit;
pub mod protocol;
pub mod respond;
pub mod search;
pub mod source;

pub(crate) use respond::respond;

/// Every route of the Elasticsearch API.
pub(crate) fn routes() -> crate::routes::Routes {
    handshake::routes()
        .merge(admin::routes())
        .merge(bulk::routes())
        .merge(documents::routes())
        .merge(search::routes())
        .merge(pit::routes())
}
