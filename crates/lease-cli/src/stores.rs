//! The concrete stores: the only module that names lease-file and lease-dynamo.

use std::path::Path;
use std::sync::Arc;

use lease_core::LeaseError;

use crate::backend::{Backend, default_dir, prepare_dir};
use crate::cli::BackendArgs;
use crate::exit::Failure;

/// Opens the store `args` names: DynamoDB with `--dynamo`, else the file store.
pub(crate) async fn open(args: &BackendArgs) -> Result<Backend, Failure> {
    match &args.dynamo {
        Some(table) => open_dynamo(table, args.endpoint.as_deref(), args.region.as_deref()).await,
        None => {
            let dir = match &args.file {
                Some(dir) => prepare_dir(dir, false)?,
                None => prepare_dir(&default_dir(), true)?,
            };
            open_file(&dir)
        }
    }
}

/// Opens the file store in `dir` (already created and checked).
pub(crate) fn open_file(dir: &Path) -> Result<Backend, Failure> {
    let store = lease_file::DirectoryStore::open(dir).map_err(|error| {
        Failure::unavailable(format!(
            "cannot open the lease directory {}: {error}",
            dir.display()
        ))
    })?;
    tracing::debug!(dir = %dir.display(), mode = ?store.mode(), "file store opened");
    let sharer = store.clone();
    let lister = store.clone();
    let mut backend = Backend::new(store, format!("file store {}", dir.display()));
    backend.kernel_lock = Some(Arc::new(move |lease| sharer.kernel_lock_descriptor(lease)));
    backend.all_keys = Some(Arc::new(move || {
        // The store decodes its own listing; sorted for a stable display.
        let mut keys = lister.keys().map_err(|e| e.to_string())?;
        keys.sort();
        Ok(keys)
    }));
    Ok(backend)
}

/// `lease prune`: removes the idle free keys of the file store `args` names and prints each
/// one removed (as `lease status` names keys), then a summary on stderr.
pub(crate) fn prune(args: &crate::cli::PruneArgs) -> Result<u8, Failure> {
    let dir = args.file.clone().unwrap_or_else(default_dir);
    match std::fs::symlink_metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(Failure::usage(format!(
                "{} is not a lease directory",
                dir.display()
            )));
        }
        Err(error) => {
            return Err(Failure::unavailable(format!(
                "cannot prune {}: {error}",
                dir.display()
            )));
        }
    }
    let store = lease_file::DirectoryStore::open(&dir).map_err(|error| {
        failure(
            &format!("cannot open the lease directory {}", dir.display()),
            &error,
        )
    })?;
    let report = store
        .prune(args.idle)
        .map_err(|error| failure(&format!("cannot prune {}", dir.display()), &error))?;
    for key in &report.removed {
        println!("{key}");
    }
    eprintln!(
        "lease: removed {} key(s) from {}; kept {} (held {}, changed within {} {}, being \
         acquired {}, token ahead of the clock {}, unreadable {})",
        report.removed.len(),
        dir.display(),
        report.kept(),
        report.held,
        lease_core::backend::fmt_duration(args.idle),
        report.recent,
        report.busy,
        report.ahead_of_clock,
        report.unreadable,
    );
    Ok(0)
}

/// `error` as the CLI's failure, prefixed with `context`, with the CLI's advice where it has
/// some ([`Failure::lease`]).
pub(crate) fn failure(context: &str, error: &LeaseError) -> Failure {
    Failure::lease(context, error, advice)
}

/// What to do about a store's error, where the CLI knows better than the library: a missing
/// DynamoDB table is made with `lease table create`.
pub(crate) fn advice(error: &LeaseError) -> Option<String> {
    let dynamo = std::error::Error::source(error)?.downcast_ref::<lease_dynamo::DynamoError>()?;
    dynamo.is_table_missing().then(|| {
        format!(
            "create it with `lease table create --dynamo {}` (with this command's --endpoint and \
             --region, if any)",
            dynamo.table()
        )
    })
}

/// Opens the DynamoDB store on `table`. Sends nothing: a missing table or bad credentials show
/// up on the first operation.
pub(crate) async fn open_dynamo(
    table: &str,
    endpoint: Option<&str>,
    region: Option<&str>,
) -> Result<Backend, Failure> {
    let leases = dynamo(table, endpoint, region).await?;
    Ok(Backend::new(leases, format!("DynamoDB table {table}")))
}

/// Creates the DynamoDB table `table` (and enables TTL on it), waiting until it is active.
pub(crate) async fn create_table(
    table: &str,
    endpoint: Option<&str>,
    region: Option<&str>,
) -> Result<(), Failure> {
    dynamo(table, endpoint, region)
        .await?
        .ensure_table()
        .await
        .map_err(|e| failure(&format!("cannot create table {table}"), &e))
}

async fn dynamo(
    table: &str,
    endpoint: Option<&str>,
    region: Option<&str>,
) -> Result<lease_dynamo::DynamoLeases, Failure> {
    // DynamoDB Local wants a region but ignores which; do not make its users set one.
    let region = region.or_else(|| {
        let configured = ["AWS_REGION", "AWS_DEFAULT_REGION"]
            .iter()
            .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
        (endpoint.is_some() && !configured).then_some("us-east-1")
    });
    let client = lease_dynamo::sdk_client(endpoint, region).await;
    lease_dynamo::DynamoLeases::new(client, table)
        .map_err(|e| failure(&format!("bad --dynamo table {table:?}"), &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_dynamodb_table_gets_advice() {
        assert_eq!(advice(&LeaseError::invalid("key", "empty")), None);
        let other_backend = LeaseError::backend("file", false, std::io::Error::other("disk full"));
        assert_eq!(advice(&other_backend), None);
    }
}
