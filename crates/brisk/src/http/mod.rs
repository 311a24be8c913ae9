//! HTTP/1.1 on hyper, with Brisk's process model, limits and stats.

pub mod body;
pub mod static_files;

pub use body::Body;
