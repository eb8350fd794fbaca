#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod builder;
mod error;
pub mod event;
mod hex;
mod path;
mod synthetic;
mod tsid;
mod value;

pub use builder::{DimKind, MetricNames, TsidBuilder, TsidComputer};
pub use error::{Error, Result};
pub use event::{
    FingerprintBuilder, FingerprintMethod, Fingerprinter, IdEncoding, TimestampPrefix, Uuid,
    uuid_v4, uuid_v7, uuid_v7_at,
};
pub use synthetic::{SYNTHETIC_ID_LEN, SYNTHETIC_ID_TEXT_LEN, SyntheticId};
pub use tsid::{TSID_HASH_LEN, TSID_LEN, TSID_PREFIX_LEN, TSID_PREFIX_VALUES, Tsid};
pub use value::{DimValue, MAX_DIMENSIONS, MAX_KEYWORD_LEN, MAX_NAME_LEN};
