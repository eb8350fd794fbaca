//! The free-space watermark (Elasticsearch's flood stage): writes to an index are
//! refused while the filesystem of its directory is fuller than this, so that a
//! refresh, a merge or a reopen always has room to finish, and lifted by themselves
//! once there is room again.

use std::path::Path;

/// When writes are refused for lack of disk space.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloodStage {
    /// Used share of the filesystem, in percent, at or above which writes are refused
    /// (`disk_flood_stage`, 95 as in Elasticsearch; 100 turns the check off).
    pub used_percent: f64,
    /// The most free space the percentage may ask for, in bytes
    /// (`disk_flood_stage_max_headroom`, 1 GiB): on a 10 TB disk, 5 % would keep 500 GB
    /// idle, so the free space required is the smaller of the two, as Elasticsearch's
    /// `max_headroom`.
    pub max_headroom: u64,
}

impl Default for FloodStage {
    fn default() -> Self {
        FloodStage {
            used_percent: 95.0,
            max_headroom: 1 << 30,
        }
    }
}

/// A filesystem's space, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// The filesystem's size.
    pub total: u64,
    /// What an unprivileged process may still write.
    pub available: u64,
}

/// The space of the filesystem holding `path` (`statvfs`).
///
/// # Errors
/// The system call's error.
pub fn space(path: &Path) -> std::io::Result<Space> {
    let s = rustix::fs::statvfs(path)?;
    Ok(Space {
        total: s.f_blocks.saturating_mul(s.f_frsize),
        available: s.f_bavail.saturating_mul(s.f_frsize),
    })
}

impl FloodStage {
    /// The free bytes required on a filesystem of `total` bytes.
    pub fn required_free(&self, total: u64) -> u64 {
        if self.used_percent >= 100.0 {
            return 0;
        }
        let share = (100.0 - self.used_percent.max(0.0)) / 100.0;
        // The product is at most `total`, which fits a u64.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let by_share = (total as f64 * share) as u64;
        by_share.min(self.max_headroom)
    }

    /// `Some(reason)` when the filesystem of `dir` has less free space than required;
    /// `None` when it has room, or when its space cannot be read (the write itself
    /// then reports the error).
    pub fn blocked(&self, dir: &Path) -> Option<String> {
        if self.used_percent >= 100.0 {
            return None;
        }
        let s = space(dir).ok()?;
        let need = self.required_free(s.total);
        (s.available < need).then(|| {
            format!(
                "disk usage exceeded the flood-stage watermark: {} bytes free of {}, under the {} required (disk_flood_stage {}%, disk_flood_stage_max_headroom {})",
                s.available, s.total, need, self.used_percent, self.max_headroom
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_required_free_space_is_the_smaller_of_share_and_headroom() {
        let f = FloodStage::default();
        assert_eq!(f.required_free(48 << 20), (48u64 << 20) / 20);
        assert_eq!(f.required_free(10 << 40), 1 << 30);
        let off = FloodStage {
            used_percent: 100.0,
            ..FloodStage::default()
        };
        assert_eq!(off.required_free(1 << 30), 0);
        assert_eq!(off.blocked(Path::new("/")), None);
    }

    #[test]
    fn a_filesystem_with_room_is_not_blocked_and_a_full_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let s = space(dir.path()).unwrap();
        assert!(s.total >= s.available && s.total > 0);
        let none = FloodStage {
            used_percent: 0.0,
            max_headroom: 0,
        };
        assert_eq!(none.blocked(dir.path()), None);
        // Asking for more free space than the filesystem has blocks it.
        let all = FloodStage {
            used_percent: 0.0,
            max_headroom: u64::MAX,
        };
        let reason = all.blocked(dir.path()).unwrap();
        assert!(reason.contains("flood-stage"), "{reason}");
    }
}
