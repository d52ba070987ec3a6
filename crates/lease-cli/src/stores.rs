//! The concrete stores: the only module that names lease-file and lease-dynamo.

use std::path::Path;

use crate::backend::Backend;
use crate::exit::Failure;

/// Opens the file store in `dir` (already created and checked).
pub(crate) fn open_file(dir: &Path) -> Result<Backend, Failure> {
    Err(Failure::unavailable(format!(
        "the file backend (crate lease-file) is not wired in yet; cannot open {}",
        dir.display()
    )))
}

/// Opens the DynamoDB store on `table`.
pub(crate) async fn open_dynamo(
    table: &str,
    endpoint: Option<&str>,
    region: Option<&str>,
) -> Result<Backend, Failure> {
    let _ = (endpoint, region);
    Err(Failure::unavailable(format!(
        "the DynamoDB backend (crate lease-dynamo) is not wired in yet; cannot open table {table}"
    )))
}

/// Creates the DynamoDB table `table`.
pub(crate) async fn create_table(
    table: &str,
    endpoint: Option<&str>,
    region: Option<&str>,
) -> Result<(), Failure> {
    let _ = (endpoint, region);
    Err(Failure::unavailable(format!(
        "the DynamoDB backend (crate lease-dynamo) is not wired in yet; cannot create table {table}"
    )))
}
