//! `FencedValues` for `RedisLeases`: one hash per value (`fence`, `data`) under the prefix.

use lease_core::backend::validate_fenced_value;
use lease_core::{BoxFuture, FencedValues, FencingToken, LeaseError, LeaseKey, NotOwnedReason};
use redis::Value;

use crate::RedisLeases;
use crate::call::Request;
use crate::record::{entries, text};

impl RedisLeases {
    async fn fenced_call(
        &self,
        operation: &'static str,
        name: &LeaseKey,
        fencing: FencingToken,
        data: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, LeaseError> {
        let inner = &self.inner;
        let script = if data.is_some() {
            &inner.scripts.put_fenced
        } else {
            &inner.scripts.fence_and_read
        };
        let mut args = vec![
            operation.as_bytes().to_vec(),
            fencing.get().to_string().into_bytes(),
        ];
        if let Some(data) = data {
            args.push(data.to_vec());
        }
        let call = Request::Script {
            script,
            keys: vec![inner.keys.value(name)],
            args,
            incarnation: None,
        };
        let answer = self
            .send(operation, &call, None)
            .await
            .map_err(crate::RedisError::into_lease_error)?;
        let items = entries(name, &answer)?;
        match items.first().and_then(text).as_deref() {
            Some("ok") => Ok(match items.get(1) {
                Some(Value::BulkString(bytes)) => Some(bytes.clone()),
                _ => None,
            }),
            Some("fenced") => {
                tracing::info!(prefix = %inner.keys.prefix, %name, %fencing, operation, "refused: a newer token touched the value");
                Err(LeaseError::not_owned(name.clone(), NotOwnedReason::Fenced))
            }
            other => Err(LeaseError::corrupt(
                name.clone(),
                format!("the {operation} script answered {other:?}"),
            )),
        }
    }
}

impl FencedValues for RedisLeases {
    /// One script: raises the fence to `fencing` iff it is not above it, returning the value.
    /// A retry after a lost reply sends the same script, which passes again at the same fence.
    fn fence_and_read<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, LeaseError>> {
        Box::pin(self.fenced_call("fence_and_read", name, fencing, None))
    }

    /// One script: writes the value iff the fence is not above `fencing`.
    fn put_fenced<'a>(
        &'a self,
        name: &'a LeaseKey,
        fencing: FencingToken,
        value: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LeaseError>> {
        Box::pin(async move {
            validate_fenced_value(value)?;
            self.fenced_call("put_fenced", name, fencing, Some(value))
                .await?;
            tracing::debug!(prefix = %self.inner.keys.prefix, %name, %fencing, bytes = value.len(), "fenced value written");
            Ok(())
        })
    }
}
