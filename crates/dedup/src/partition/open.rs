//! Creating and opening a store (recovering what a crash left: unlisted partition
//! directories, a rollup rebuild cut short), and what makes its state durable: refresh,
//! sync, close.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tidemark_segment::Segment;

use super::manifest::{PartManifest, PartState};
use super::{Engine0, PARTITIONS_NAME, Part, PartitionConfig, PartitionedEngine};
use super::{append, part_dir_name, rollup};
use crate::config::EngineConfig;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::manifest::MANIFEST_NAME;
use crate::stats::DedupStats;

impl PartitionedEngine {
    /// Creates a partitioned store in `dir` (created if needed).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`], [`Error::AlreadyExists`], I/O errors.
    pub fn create(
        dir: impl AsRef<Path>,
        engine_config: EngineConfig,
        config: PartitionConfig,
    ) -> Result<PartitionedEngine> {
        config.check()?;
        engine_config.check()?;
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        if dir.join(MANIFEST_NAME).exists() || dir.join(PARTITIONS_NAME).exists() {
            return Err(Error::AlreadyExists { path: dir });
        }
        let manifest = config.into_manifest();
        manifest.write(&dir)?;
        let keyer = Engine0(crate::engine::keyer_of(&engine_config)?);
        Ok(PartitionedEngine::empty(
            dir,
            engine_config,
            Some(manifest),
            keyer,
        ))
    }

    /// Creates a single-engine store (one [`Engine`] at `dir`, no partitions).
    ///
    /// # Errors
    /// As [`Engine::create`].
    pub fn create_single(dir: impl AsRef<Path>, engine_config: EngineConfig) -> Result<Self> {
        let engine = Engine::create(dir, engine_config)?;
        Ok(PartitionedEngine::single(engine))
    }

    fn single(engine: Engine) -> PartitionedEngine {
        let dir = engine.dir().to_path_buf();
        let engine_config = engine.config().clone();
        let keyer = Engine0(crate::engine::keyer_of(&engine_config).ok().flatten());
        let mut store = PartitionedEngine::empty(dir.clone(), engine_config, None, keyer);
        store.parts.insert(
            i64::MIN,
            Part {
                start: i64::MIN,
                end: i64::MAX,
                dir,
                engine,
                state: PartState::Active,
                rollups: Vec::new(),
                refs: append::PartRefs::default(),
            },
        );
        store
    }

    /// Opens the store in `dir`: partitioned when it holds a `PARTITIONS` manifest, else
    /// the single engine at `dir` (`create_single` = true creates one if there is none).
    /// Partition directories the manifest does not list (left by a crash while one was
    /// created or dropped) are removed; a partition whose rollups a crash may have left
    /// behind is rebuilt.
    ///
    /// # Errors
    /// [`Error::NoManifest`], manifest errors, engine errors naming the file.
    pub fn open(dir: impl AsRef<Path>, engine_config: EngineConfig) -> Result<PartitionedEngine> {
        PartitionedEngine::open_inner(dir.as_ref(), engine_config, false)
    }

    /// As [`open`](Self::open), creating a single-engine store where `dir` holds none.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_or_create_single(
        dir: impl AsRef<Path>,
        engine_config: EngineConfig,
    ) -> Result<PartitionedEngine> {
        PartitionedEngine::open_inner(dir.as_ref(), engine_config, true)
    }

    fn open_inner(dir: &Path, engine_config: EngineConfig, create: bool) -> Result<Self> {
        let Some(manifest) = PartManifest::read(dir)? else {
            let engine = if create {
                Engine::open_or_create(dir, engine_config)?
            } else {
                Engine::open(dir, engine_config)?
            };
            return Ok(PartitionedEngine::single(engine));
        };
        engine_config.check()?;
        let listed: HashSet<String> = manifest
            .partitions
            .iter()
            .map(|(s, _)| part_dir_name(*s))
            .collect();
        // Orphans: created but never listed, or dropped but not yet removed.
        for entry in std::fs::read_dir(dir).map_err(Error::io(dir))? {
            let entry = entry.map_err(Error::io(dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with("p-") && !listed.contains(name) {
                let path = entry.path();
                std::fs::remove_dir_all(&path).map_err(Error::io(&path))?;
            }
        }
        let keyer = Engine0(crate::engine::keyer_of(&engine_config)?);
        let mut store = PartitionedEngine::empty(
            dir.to_path_buf(),
            engine_config,
            Some(manifest.clone()),
            keyer,
        );
        let mut dirty = Vec::new();
        for (start, state) in &manifest.partitions {
            let pdir = dir.join(part_dir_name(*start));
            if let PartState::RawExpired { kept } = *state {
                let part = store.open_expired(&manifest, *start, pdir, kept)?;
                store.expired.insert(*start, part);
                continue;
            }
            let engine = Engine::open(pdir.join("engine"), store.engine_config.clone())?;
            let mut rollups = Vec::new();
            if *state == PartState::Sealed {
                for r in &manifest.rollups {
                    let path = rollup::rollup_path(&pdir, *r);
                    let seg = if path.exists() {
                        Some(Arc::new(Segment::open(&path)?))
                    } else {
                        None
                    };
                    rollups.push((*r, seg));
                }
            }
            if *state == PartState::Dirty {
                dirty.push(*start);
            }
            store.parts.insert(
                *start,
                Part {
                    start: *start,
                    end: start.saturating_add(manifest.width_ms),
                    dir: pdir,
                    engine,
                    state: *state,
                    rollups,
                    refs: append::PartRefs::default(),
                },
            );
        }
        for start in dirty {
            store.seal(start)?;
        }
        Ok(store)
    }

    /// Writes every partition's buffer as a segment.
    ///
    /// # Errors
    /// Engine errors.
    pub fn refresh(&mut self) -> Result<()> {
        self.parts
            .values_mut()
            .try_for_each(|p| p.engine.refresh())?;
        self.save_clock()
    }

    /// Syncs every partition's log.
    ///
    /// # Errors
    /// I/O errors.
    pub fn sync(&mut self) -> Result<()> {
        self.parts.values_mut().try_for_each(|p| p.engine.sync())
    }

    /// Closes every partition, and every attached store.
    ///
    /// # Errors
    /// I/O errors.
    pub fn close(mut self) -> Result<()> {
        self.save_clock()?;
        for p in self.parts.into_values() {
            p.engine.close()?;
        }
        for a in self.attached {
            a.close()?;
        }
        Ok(())
    }

    /// A store with no partition open yet and every counter at zero.
    fn empty(
        dir: PathBuf,
        engine_config: EngineConfig,
        manifest: Option<PartManifest>,
        keyer: Engine0,
    ) -> PartitionedEngine {
        PartitionedEngine {
            dir,
            engine_config,
            manifest,
            parts: BTreeMap::new(),
            expired: BTreeMap::new(),
            idle: HashMap::new(),
            retired: DedupStats::default(),
            rejected_too_old: 0,
            rollup_rebuilds: 0,
            clock_unsaved: false,
            postings: std::sync::Mutex::default(),
            keyer,
            catalog: append::Catalog::default(),
            append_scratch: append::AppendScratch::default(),
            background_merges: false,
            background_refresh: false,
            attached: Vec::new(),
        }
    }
}
