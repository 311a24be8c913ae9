//! Waiting for one of a pool's places (a transaction's connection), for as long as the
//! pool's acquire timeout allows.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::DbError;

/// One of `places`, waiting up to `wait` ([`DbError::PoolTimeout`] past it).
pub(super) async fn take(
    places: &Arc<Semaphore>,
    wait: Duration,
) -> Result<OwnedSemaphorePermit, DbError> {
    if let Ok(permit) = places.clone().try_acquire_owned() {
        return Ok(permit);
    }
    crate::db_figures::waited();
    tokio::time::timeout(wait, places.clone().acquire_owned())
        .await
        .map_err(|_| DbError::pool_timed_out(wait))?
        .map_err(|_| DbError::Unavailable("the pool is closed".into()))
}
