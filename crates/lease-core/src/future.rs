//! The one future type of the contract: boxed, `Send`, no runtime attached. The lowest module:
//! everything that returns a future uses it.

use std::future::Future;
use std::pin::Pin;

/// A boxed, `Send` future: what the dyn-compatible contract returns, with no runtime attached.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
