//! Where a lake's bytes go: an object store of the `object_store` crate, a local
//! directory by default and, with the `s3` feature, an S3-compatible bucket by URL.
//!
//! The lake writes four kinds of objects: data files (streamed as a multipart upload:
//! on a local filesystem a staged file renamed into place when complete, so a crash
//! never leaves a partial file under the final name; made durable together, once all of
//! a commit's files are written, by [`LakeStore::sync_written`]), log commits (put-if-absent:
//! `PutMode::Create`, a hard link on a local filesystem, a conditional `If-None-Match`
//! put on S3), checkpoints and `_last_checkpoint` (overwritten), and deletes (vacuum).
//! The crate's API is async; the lake is not, so each store owns a current-thread
//! tokio runtime and blocks on it (an export is one thread writing one file at a time).

use std::io::Write;
use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use tokio::runtime::Runtime;

use crate::error::{Error, Result};

/// Bytes per part of a data file's multipart upload (S3 wants at least 5 MiB).
const PART_BYTES: usize = 8 << 20;
/// Parts of one data file uploading at once.
const PARTS_IN_FLIGHT: usize = 2;

/// One object listed by [`LakeStore::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    /// Its path relative to the store's root (`/`-separated).
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// When it was last written (milliseconds since the epoch).
    pub last_modified_ms: i64,
}

/// A lake's root in an object store: a local directory, or (feature `s3`) an
/// `s3://bucket/prefix` URL. Cheap to clone; tables below the root are
/// [`child`](Self::child)ren sharing its store and runtime.
#[derive(Debug, Clone)]
pub struct LakeStore {
    store: Arc<dyn ObjectStore>,
    /// Where data files are uploaded: `store`, or for a local directory the same
    /// filesystem without an fsync per upload (see [`LakeStore::sync_written`]).
    data: Arc<dyn ObjectStore>,
    /// The root as a local directory (absolute), for a local lake.
    local_root: Option<std::path::PathBuf>,
    runtime: Arc<Runtime>,
    /// The root inside the store.
    prefix: StorePath,
    /// The root as the user named it (for messages).
    location: String,
}

impl LakeStore {
    /// The lake in the local directory `dir` (which need not exist yet: directories are
    /// made as files are written). Writes are fsynced, file and directory: log commits
    /// and checkpoints as they are written, data files by
    /// [`sync_written`](Self::sync_written) before the commit that names them.
    ///
    /// # Errors
    /// [`Error::Io`] if the current directory cannot be read (for a relative `dir`);
    /// [`Error::Store`] for a path the object store cannot name.
    pub fn local(dir: &std::path::Path) -> Result<LakeStore> {
        let absolute = std::path::absolute(dir).map_err(Error::io(dir))?;
        let prefix = StorePath::from_absolute_path(&absolute).map_err(|e| Error::Store {
            location: dir.display().to_string(),
            source: e.into(),
        })?;
        let store = LocalFileSystem::new().with_fsync(true);
        let mut lake = LakeStore::with_store(Arc::new(store), prefix, dir.display().to_string())?;
        lake.data = Arc::new(LocalFileSystem::new());
        lake.local_root = Some(absolute);
        Ok(lake)
    }

    /// The lake at `location`: `s3://bucket/prefix` (feature `s3`; region, endpoint
    /// and credentials from the `AWS_*` environment variables, e.g. `AWS_ENDPOINT`,
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`),
    /// `file:///absolute/dir`, or else a local directory path.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a URL scheme this build does not write (`s3://`
    /// without the `s3` feature, `gs://`, ...); [`Error::Store`] when the store cannot
    /// be configured (no bucket, bad credentials variables).
    pub fn open(location: &str) -> Result<LakeStore> {
        let Some((scheme, rest)) = location.split_once("://") else {
            return LakeStore::local(std::path::Path::new(location));
        };
        match scheme {
            "file" => LakeStore::local(std::path::Path::new(rest)),
            #[cfg(feature = "s3")]
            "s3" | "s3a" => {
                let url = format!("s3://{rest}");
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                let store = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .build()
                    .map_err(|e| Error::Store {
                        location: url.clone(),
                        source: e,
                    })?;
                let prefix =
                    StorePath::parse(prefix.trim_end_matches('/')).map_err(|e| Error::Store {
                        location: url.clone(),
                        source: e.into(),
                    })?;
                LakeStore::with_store(Arc::new(store), prefix, url)
            }
            other => Err(Error::InvalidOption {
                name: "lake location",
                detail: format!(
                    "`{other}://` is not a store this build writes: a directory, file:///dir{}",
                    if cfg!(feature = "s3") {
                        " or s3://bucket/prefix"
                    } else {
                        " (s3:// needs tidemark-lake's `s3` feature)"
                    }
                ),
            }),
        }
    }

    fn with_store(
        store: Arc<dyn ObjectStore>,
        prefix: StorePath,
        location: String,
    ) -> Result<LakeStore> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(Error::io(std::path::Path::new(&location)))?;
        Ok(LakeStore {
            data: Arc::clone(&store),
            local_root: None,
            store,
            runtime: Arc::new(runtime),
            prefix,
            location,
        })
    }

    /// The store rooted at `rel` below this root (e.g. a rollup table's
    /// `_rollups/1h`), sharing the store and its runtime.
    pub fn child(&self, rel: &str) -> LakeStore {
        LakeStore {
            store: self.store.clone(),
            data: self.data.clone(),
            local_root: self.local_root.as_ref().map(|r| {
                rel.split('/')
                    .filter(|p| !p.is_empty())
                    .fold(r.clone(), |p, part| p.join(part))
            }),
            runtime: self.runtime.clone(),
            prefix: self.path(rel),
            location: format!("{}/{}", self.location.trim_end_matches('/'), rel),
        }
    }

    /// The root as named when opened (a directory or a URL), for messages.
    pub fn location(&self) -> &str {
        &self.location
    }

    fn path(&self, rel: &str) -> StorePath {
        rel.split('/')
            .filter(|p| !p.is_empty())
            .fold(self.prefix.clone(), |p, part| p.join(part))
    }

    fn error(&self, rel: &str) -> impl FnOnce(object_store::Error) -> Error + '_ {
        let location = format!("{}/{rel}", self.location.trim_end_matches('/'));
        move |source| Error::Store { location, source }
    }

    /// Writes `bytes` at `rel`, replacing what is there (atomically).
    pub(crate) fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<()> {
        let path = self.path(rel);
        self.runtime
            .block_on(self.store.put(&path, PutPayload::from(bytes)))
            .map(|_| ())
            .map_err(self.error(rel))
    }

    /// Writes `bytes` at `rel` only if nothing is there: `Ok(false)` if something is.
    pub(crate) fn put_if_absent(&self, rel: &str, bytes: Vec<u8>) -> Result<bool> {
        let path = self.path(rel);
        let opts = PutOptions::from(PutMode::Create);
        match self
            .runtime
            .block_on(self.store.put_opts(&path, PutPayload::from(bytes), opts))
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(self.error(rel)(e)),
        }
    }

    /// The bytes at `rel`, `None` if there is no such object.
    pub(crate) fn get(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path(rel);
        let got = self.runtime.block_on(async {
            let r = self.store.get(&path).await?;
            r.bytes().await
        });
        match got {
            Ok(b) => Ok(Some(b.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(rel)(e)),
        }
    }

    /// Every object under `rel` (recursively; `""`: the whole root), paths relative to
    /// this root.
    pub(crate) fn list(&self, rel: &str) -> Result<Vec<StoredObject>> {
        use futures_util::TryStreamExt;
        let path = self.path(rel);
        let listed: std::result::Result<Vec<_>, _> = self
            .runtime
            .block_on(self.store.list(Some(&path)).try_collect());
        let metas = match listed {
            Ok(m) => m,
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(self.error(rel)(e)),
        };
        Ok(metas
            .into_iter()
            .filter_map(|m| {
                let parts: Vec<String> = m
                    .location
                    .prefix_match(&self.prefix)?
                    .map(|p| p.as_ref().to_owned())
                    .collect();
                Some(StoredObject {
                    path: parts.join("/"),
                    size: m.size,
                    last_modified_ms: m.last_modified.timestamp_millis(),
                })
            })
            .collect())
    }

    /// Deletes the object at `rel` (nothing if it is gone already).
    pub(crate) fn delete(&self, rel: &str) -> Result<()> {
        let path = self.path(rel);
        match self.runtime.block_on(self.store.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error(rel)(e)),
        }
    }

    /// A writer streaming a new object to `rel` (a multipart upload): nothing is
    /// visible at `rel` until [`Upload::finish`].
    pub(crate) fn upload(&self, rel: &str) -> Result<Upload<'_>> {
        let path = self.path(rel);
        let upload = self
            .runtime
            .block_on(self.data.put_multipart(&path))
            .map_err(self.error(rel))?;
        Ok(Upload {
            store: self,
            rel: rel.to_owned(),
            parts: Some(WriteMultipart::new_with_chunk_size(upload, PART_BYTES)),
        })
    }
}

impl LakeStore {
    /// The local path of the object at `rel`, for a lake in a local directory (`None`
    /// for an object store).
    pub fn local_path(&self, rel: &str) -> Option<std::path::PathBuf> {
        self.local_root.as_ref().map(|root| {
            rel.split('/')
                .filter(|p| !p.is_empty())
                .fold(root.clone(), |p, part| p.join(part))
        })
    }

    /// Streams the object at `rel` to the local file `dest` (replaced), chunk by chunk.
    ///
    /// # Errors
    /// [`Error::Store`] for what the store refuses (a missing object included),
    /// [`Error::Io`] writing `dest`.
    pub fn download(&self, rel: &str, dest: &std::path::Path) -> Result<()> {
        use futures_util::StreamExt;
        let path = self.path(rel);
        let mut out = std::fs::File::create(dest).map_err(Error::io(dest))?;
        self.runtime.block_on(async {
            let got = self.store.get(&path).await.map_err(self.error(rel))?;
            let mut stream = got.into_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(self.error(rel))?;
                out.write_all(&chunk).map_err(Error::io(dest))?;
            }
            Ok::<(), Error>(())
        })?;
        out.flush().map_err(Error::io(dest))
    }

    /// Makes the data files at `rels` (complete uploads) durable: on a local directory,
    /// each file is fsynced, then each directory from the files' up to the root's
    /// parent once (new directories and the renames into them), so a commit that names
    /// them never outlives them in a crash. An object store's completed upload is
    /// durable already: nothing to do.
    ///
    /// # Errors
    /// [`Error::Io`] when a file or directory cannot be opened or synced.
    pub(crate) fn sync_written(&self, rels: &[&str]) -> Result<()> {
        let Some(root) = &self.local_root else {
            return Ok(());
        };
        let mut dirs = std::collections::BTreeSet::new();
        for rel in rels {
            let Some(path) = self.local_path(rel) else {
                continue;
            };
            let file = std::fs::File::open(&path).map_err(Error::io(&path))?;
            file.sync_all().map_err(Error::io(&path))?;
            let mut dir = path.parent();
            while let Some(d) = dir {
                dirs.insert(d.to_path_buf());
                if d == root.as_path() {
                    break;
                }
                dir = d.parent();
            }
        }
        if let Some(parent) = root.parent() {
            dirs.insert(parent.to_path_buf());
        }
        for d in dirs {
            let handle = std::fs::File::open(&d).map_err(Error::io(&d))?;
            handle.sync_all().map_err(Error::io(&d))?;
        }
        Ok(())
    }
}

/// An object being written by parts (see [`LakeStore::upload`]); aborted if dropped
/// before [`finish`](Self::finish).
pub(crate) struct Upload<'s> {
    store: &'s LakeStore,
    rel: String,
    parts: Option<WriteMultipart>,
}

impl Upload<'_> {
    /// Completes the upload: the object appears at its path.
    pub(crate) fn finish(mut self) -> Result<()> {
        let Some(parts) = self.parts.take() else {
            return Ok(());
        };
        let rt = &self.store.runtime;
        let _enter = rt.enter();
        rt.block_on(parts.finish())
            .map(|_| ())
            .map_err(self.store.error(&self.rel))
    }
}

impl Write for Upload<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let Some(parts) = self.parts.as_mut() else {
            return Err(std::io::Error::other("the upload is finished"));
        };
        let rt = &self.store.runtime;
        // A part is spawned on the runtime when the buffer fills; waiting for room
        // drives the uploads and bounds the memory to a few parts.
        let _enter = rt.enter();
        parts.write(buf);
        rt.block_on(parts.wait_for_capacity(PARTS_IN_FLIGHT))
            .map_err(std::io::Error::other)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Upload<'_> {
    fn drop(&mut self) {
        if let Some(parts) = self.parts.take() {
            let rt = &self.store.runtime;
            let _enter = rt.enter();
            // Best effort: a local staged file or the store's pending parts go away.
            let _ = rt.block_on(parts.abort());
        }
    }
}
