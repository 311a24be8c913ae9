//! Static files under a root directory (being written).
