//! Checkpoint storage through `object_store`: state files, manifests, held result rows
//! and markers under `<dir>/<job>/chk-<id>/`; listing, loading with verification, pruning.

use std::collections::BTreeMap;
use std::path::Path as FsPath;
use std::sync::{Arc, Mutex, OnceLock};

use datafusion_common::arrow::record_batch::RecordBatch;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sluice_common::{Result, SluiceError};

use super::{Manifest, RestoredCheckpoint, StateFile};

/// A checkpoint storage location for one job (see the module docs).
pub struct CheckpointStorage {
    store: Arc<dyn ObjectStore>,
    root: Path,
    /// For messages: where the checkpoints are.
    display: String,
    /// The job's directory, for a local store (emptied directories are removed).
    local_dir: Option<std::path::PathBuf>,
    /// Drives the object store's I/O (`None` only while dropping).
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for CheckpointStorage {
    /// Shuts the I/O runtime down without blocking: storage may be dropped on an
    /// application's async thread (an embedding that starts jobs from async code), where
    /// a blocking runtime drop would panic.
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for CheckpointStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CheckpointStorage({})", self.display)
    }
}

/// `memory://` stores by name, for the life of the process.
fn memory_stores() -> &'static Mutex<BTreeMap<String, Arc<dyn ObjectStore>>> {
    static STORES: OnceLock<Mutex<BTreeMap<String, Arc<dyn ObjectStore>>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

fn storage_error(what: String) -> impl FnOnce(object_store::Error) -> SluiceError {
    move |e| SluiceError::Execution(format!("{what}: {e}"))
}

impl CheckpointStorage {
    /// Runs an object store operation to completion. Called from an async context (an
    /// application's tokio task starting a job), it runs on a scoped helper thread, since
    /// a runtime cannot block inside another.
    fn block_on<F>(&self, future: F) -> F::Output
    where
        F: std::future::Future + Send,
        F::Output: Send,
    {
        let runtime = self
            .runtime
            .as_ref()
            .expect("the I/O runtime lives until the storage is dropped");
        if tokio::runtime::Handle::try_current().is_err() {
            return runtime.block_on(future);
        }
        std::thread::scope(|scope| {
            scope
                .spawn(|| runtime.block_on(future))
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// Opens `dir` (URL or path, see the module docs) for job `job`.
    ///
    /// # Errors
    /// An unsupported URL scheme, a local directory that cannot be created, S3 settings
    /// missing from the environment.
    pub fn open(dir: &str, working_dir: &FsPath, job: &str) -> Result<Self> {
        Self::open_with(dir, working_dir, job, true)
    }

    /// [`Self::open`]; a local directory is created only when `create`.
    fn open_with(dir: &str, working_dir: &FsPath, job: &str, create: bool) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SluiceError::io("starting the checkpoint I/O runtime", e))?;
        let mut local_root = None;
        let (store, prefix, display): (Arc<dyn ObjectStore>, String, String) =
            if let Some(rest) = dir.strip_prefix("memory://") {
                let (name, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                let mut stores = memory_stores().lock().unwrap_or_else(|e| e.into_inner());
                let store = stores
                    .entry(name.to_string())
                    .or_insert_with(|| Arc::new(object_store::memory::InMemory::new()))
                    .clone();
                (store, prefix.to_string(), dir.to_string())
            } else if dir.starts_with("s3://") || dir.starts_with("s3a://") {
                let url = dir.replacen("s3a://", "s3://", 1);
                let rest = &url["s3://".len()..];
                let prefix = rest.split_once('/').map(|(_, p)| p).unwrap_or("");
                let mut builder = object_store::aws::AmazonS3Builder::from_env().with_url(&url);
                let endpoint = std::env::var("AWS_ENDPOINT_URL")
                    .or_else(|_| std::env::var("AWS_ENDPOINT"))
                    .unwrap_or_default();
                if endpoint.starts_with("http://") {
                    builder = builder.with_allow_http(true);
                }
                let store = builder
                    .build()
                    .map_err(|e| SluiceError::Config(format!("checkpoint storage '{dir}': {e}")))?;
                (Arc::new(store), prefix.to_string(), dir.to_string())
            } else if dir.contains("://") && !dir.starts_with("file://") {
                return Err(SluiceError::Config(format!(
                    "checkpoint storage '{dir}': supported are file://, memory:// and s3:// \
                     URLs and local paths"
                )));
            } else {
                let path = dir.strip_prefix("file://").unwrap_or(dir);
                let path = if FsPath::new(path).is_absolute() {
                    FsPath::new(path).to_path_buf()
                } else {
                    working_dir.join(path)
                };
                if create {
                    std::fs::create_dir_all(&path).map_err(|e| {
                        SluiceError::io(
                            format!("creating checkpoint directory '{}'", path.display()),
                            e,
                        )
                    })?;
                } else if !path.is_dir() {
                    return Err(SluiceError::Config(format!(
                        "checkpoint directory '{}' does not exist",
                        path.display()
                    )));
                }
                let store = object_store::local::LocalFileSystem::new_with_prefix(&path)
                    .map_err(storage_error(format!("opening '{}'", path.display())))?;
                local_root = Some(path.clone());
                (Arc::new(store), String::new(), path.display().to_string())
            };
        let prefix = prefix.trim_matches('/');
        let root = if prefix.is_empty() {
            Path::from(job)
        } else {
            Path::from(format!("{prefix}/{job}"))
        };
        Ok(CheckpointStorage {
            store,
            local_dir: local_root.map(|r| r.join(root.as_ref())),
            root,
            display: format!("{}/{job}", display.trim_end_matches('/')),
            runtime: Some(runtime),
        })
    }

    /// Opens the storage a `chk-<id>` directory (path or URL, optionally ending in
    /// `/_manifest.json`) belongs to, and returns it with the id.
    ///
    /// # Errors
    /// A path that does not end in `<job>/chk-<id>`.
    pub fn open_checkpoint_path(path: &str, working_dir: &FsPath) -> Result<(Self, u64)> {
        let trimmed = path
            .trim_end_matches('/')
            .trim_end_matches("_manifest.json")
            .trim_end_matches('/');
        let bad = || {
            SluiceError::Config(format!(
                "'{path}' is not a checkpoint: expected a path ending in <job>/chk-<id>"
            ))
        };
        let (parent, chk) = trimmed.rsplit_once('/').ok_or_else(bad)?;
        let id = chk
            .strip_prefix("chk-")
            .and_then(|i| i.parse::<u64>().ok())
            .ok_or_else(bad)?;
        let (dir, job) = parent.rsplit_once('/').unwrap_or((".", parent));
        let dir = if dir.is_empty() { "/" } else { dir };
        Ok((Self::open_with(dir, working_dir, job, false)?, id))
    }

    /// Where the checkpoints are, for messages.
    pub fn display(&self) -> &str {
        &self.display
    }

    fn path(&self, id: u64, name: &str) -> Path {
        self.root.clone().join(format!("chk-{id}")).join(name)
    }

    /// Writes a file of checkpoint `id`.
    ///
    /// # Errors
    /// The store's put failed.
    pub fn put(&self, id: u64, name: &str, bytes: Vec<u8>) -> Result<()> {
        let path = self.path(id, name);
        self.block_on(self.store.put(&path, PutPayload::from(bytes)))
            .map_err(storage_error(format!("writing checkpoint file '{path}'")))?;
        Ok(())
    }

    fn get(&self, id: u64, name: &str) -> Result<Vec<u8>> {
        let path = self.path(id, name);
        let bytes = self
            .block_on(async { self.store.get(&path).await?.bytes().await })
            .map_err(|e| match e {
                object_store::Error::NotFound { .. } => SluiceError::Execution(format!(
                    "'{}/chk-{id}/{name}' does not exist",
                    self.display
                )),
                e => SluiceError::Execution(format!(
                    "reading '{}/chk-{id}/{name}': {e}",
                    self.display
                )),
            })?;
        Ok(bytes.to_vec())
    }

    /// Ids of the checkpoint directories present (complete or not), ascending.
    ///
    /// # Errors
    /// The store cannot be listed.
    pub fn checkpoint_ids(&self) -> Result<Vec<u64>> {
        let listing = self
            .block_on(self.store.list_with_delimiter(Some(&self.root)))
            .map_err(storage_error(format!("listing '{}'", self.display)))?;
        let mut ids: Vec<u64> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename())
            .filter_map(|name| name.strip_prefix("chk-")?.parse().ok())
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// Deletes every file of checkpoint `id`.
    ///
    /// # Errors
    /// The store cannot be listed or a delete fails.
    pub fn delete(&self, id: u64) -> Result<()> {
        let dir = self.root.clone().join(format!("chk-{id}"));
        self.block_on(async {
            let listing = self
                .store
                .list_with_delimiter(Some(&dir))
                .await
                .map_err(storage_error(format!("listing '{dir}'")))?;
            // The manifest first: a half-deleted checkpoint must not look complete.
            let mut objects = listing.objects;
            objects.sort_by_key(|o| o.location.filename() != Some("_manifest.json"));
            for o in objects {
                self.store
                    .delete(&o.location)
                    .await
                    .map_err(storage_error(format!("deleting '{}'", o.location)))?;
            }
            Ok::<(), SluiceError>(())
        })?;
        if let Some(local) = &self.local_dir {
            // Object stores have no directories; a local one keeps them.
            let _ = std::fs::remove_dir(local.join(format!("chk-{id}")));
        }
        Ok(())
    }

    /// Writes a state file and returns its manifest entry.
    ///
    /// # Errors
    /// The put failed.
    pub fn put_state(
        &self,
        id: u64,
        operator: usize,
        subtask: usize,
        bytes: Vec<u8>,
        rows: u64,
    ) -> Result<StateFile> {
        let name = format!("op-{operator}-{subtask}.arrow");
        let entry = StateFile {
            operator,
            subtask,
            name: name.clone(),
            bytes: bytes.len() as u64,
            crc32: crc32fast::hash(&bytes),
            rows,
        };
        self.put(id, &name, bytes)?;
        Ok(entry)
    }

    /// Writes the pre-committed result rows of checkpoint `id` (one Arrow IPC stream) and
    /// returns their manifest entry.
    ///
    /// # Errors
    /// The put failed, or the batches cannot be encoded.
    pub fn put_results(&self, id: u64, batches: &[RecordBatch]) -> Result<StateFile> {
        let mut bytes = Vec::new();
        {
            let schema = batches
                .first()
                .map(|b| b.schema())
                .ok_or_else(|| SluiceError::Internal("no result rows to write".into()))?;
            let mut w =
                datafusion_common::arrow::ipc::writer::StreamWriter::try_new(&mut bytes, &schema)?;
            for b in batches {
                w.write(b)?;
            }
            w.finish()?;
        }
        let name = "results.arrow".to_string();
        let entry = StateFile {
            operator: 0,
            subtask: 0,
            name: name.clone(),
            bytes: bytes.len() as u64,
            crc32: crc32fast::hash(&bytes),
            rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
        };
        self.put(id, &name, bytes)?;
        Ok(entry)
    }

    /// Checkpoint `id`'s directory, as shown in messages (`<storage>/chk-<id>`).
    pub fn location(&self, id: u64) -> String {
        format!("{}/chk-{id}", self.display)
    }

    /// Whether file `name` of checkpoint `id` exists.
    pub fn exists(&self, id: u64, name: &str) -> bool {
        self.block_on(self.store.head(&self.path(id, name))).is_ok()
    }

    /// Writes the manifest, which completes the checkpoint.
    ///
    /// # Errors
    /// The put failed.
    pub fn put_manifest(&self, manifest: &Manifest) -> Result<()> {
        let json = serde_json::to_vec_pretty(manifest)
            .map_err(|e| SluiceError::Internal(format!("encoding a manifest: {e}")))?;
        self.put(manifest.checkpoint_id, "_manifest.json", json)
    }

    /// Reads and verifies checkpoint `id`: its manifest, and each state file's size and
    /// checksum.
    ///
    /// # Errors
    /// No manifest (the checkpoint is incomplete), an unreadable manifest, a missing
    /// file, a size or checksum mismatch, undecodable state.
    pub fn load(&self, id: u64) -> Result<RestoredCheckpoint> {
        let where_ = format!("checkpoint {id} in '{}'", self.display);
        let manifest = self.get(id, "_manifest.json").map_err(|e| {
            SluiceError::Execution(format!(
                "{where_} is incomplete or missing (no manifest): {}",
                e.to_string().trim_start_matches("Execution error: ")
            ))
        })?;
        let manifest: Manifest = serde_json::from_slice(&manifest).map_err(|e| {
            SluiceError::Execution(format!("{where_} has an unreadable manifest: {e}"))
        })?;
        if manifest.checkpoint_id != id {
            return Err(SluiceError::Execution(format!(
                "{where_}: its manifest names checkpoint {}",
                manifest.checkpoint_id
            )));
        }
        let mut state: BTreeMap<usize, Vec<RecordBatch>> = BTreeMap::new();
        let mut pending_results = Vec::new();
        for (i, f) in manifest
            .files
            .iter()
            .chain(manifest.pending_results.iter())
            .enumerate()
        {
            let bytes = self.get(id, &f.name)?;
            if bytes.len() as u64 != f.bytes || crc32fast::hash(&bytes) != f.crc32 {
                return Err(SluiceError::Execution(format!(
                    "{where_}: state file '{}' is corrupt ({} bytes, CRC-32 {:08x}; the \
                     manifest says {} bytes, {:08x})",
                    f.name,
                    bytes.len(),
                    crc32fast::hash(&bytes),
                    f.bytes,
                    f.crc32
                )));
            }
            let batches = crate::state::from_ipc(&bytes)?;
            if i < manifest.files.len() {
                state.entry(f.operator).or_default().extend(batches);
            } else {
                pending_results.extend(batches);
            }
        }
        Ok(RestoredCheckpoint {
            manifest,
            state,
            pending_results,
            location: self.location(id),
        })
    }

    /// The newest checkpoint that loads and verifies, skipping (and reporting through
    /// `warn`) incomplete or corrupt ones; `None` when there is none.
    ///
    /// # Errors
    /// The store cannot be listed.
    pub fn latest(&self, warn: &mut dyn FnMut(String)) -> Result<Option<RestoredCheckpoint>> {
        self.latest_since(0, warn)
    }

    /// [`Self::latest`] among checkpoints with ids `>= min_id` (a run's own).
    ///
    /// # Errors
    /// The store cannot be listed.
    pub fn latest_since(
        &self,
        min_id: u64,
        warn: &mut dyn FnMut(String),
    ) -> Result<Option<RestoredCheckpoint>> {
        for id in self.checkpoint_ids()?.into_iter().rev() {
            if id < min_id {
                break;
            }
            match self.load(id) {
                Ok(c) => return Ok(Some(c)),
                Err(e) => warn(format!("skipping checkpoint {id}: {e}")),
            }
        }
        Ok(None)
    }

    /// Keeps the newest `retained` complete checkpoints up to `latest_complete`; deletes
    /// older ones and incomplete ones older than it (orphans of failed checkpoints).
    ///
    /// # Errors
    /// Listing or deleting fails.
    pub fn prune(&self, latest_complete: u64, retained: usize) -> Result<()> {
        let ids = self.checkpoint_ids()?;
        let mut kept = 0usize;
        for id in ids.into_iter().rev() {
            if id > latest_complete {
                continue; // a checkpoint in progress
            }
            let complete = self.exists(id, "_manifest.json");
            if complete && kept < retained.max(1) {
                kept += 1;
                continue;
            }
            self.delete(id)?;
        }
        Ok(())
    }
}
