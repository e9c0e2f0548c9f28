//! The Python package's sample file, `<prefix>_rank<NNNNN>.sps` (format version 1, as its
//! `native_samples.py` reads it), next to the profile: `<prefix>` is the profile's path
//! without `.h5`. Native byte order:
//!
//! ```text
//! char[8] "SCOPESMP", int32 version (1), int32 rank, int32 rate [Hz],
//! int64 ticks (samples taken, in and outside regions),
//! int32 regions, per region: int32 length, bytes of the name,
//! int32 modules, per module: int32 length, bytes of the path, uint64 load address,
//! int64 samples, per sample: int32 region (-1: outside every region), int32 module
//! (-1: unknown), uint64 address
//! ```
//!
//! The load address is the module's load bias (runtime minus file address; 0 for a non-PIE
//! executable), so `scope-profiler native-lines`, which gives `addr2line` the address minus
//! it, resolves PIE and non-PIE programs and shared libraries alike. Every sample is one
//! record, as the package's own sampler writes them (16 bytes each).
//!
//! Written privately and renamed into place (`safe_file`); when the profile's directory
//! cannot take it, in `$TMPDIR`, `/tmp` or `$HOME` under a name of its own, and said so.

use crate::model::samples::SampleProfile;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"SCOPESMP";
pub const VERSION: i32 = 1;

/// `<prefix>_rank<NNNNN>.sps` for the profile `target` (a directory means its default file).
pub fn path_for(target: &Path, rank: i64) -> PathBuf {
    let mut target = target.to_path_buf();
    if target.is_dir() {
        target.push(crate::config::DEFAULT_FILE);
    }
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "profiling_data.h5".into());
    let prefix = name.strip_suffix(".h5").or_else(|| name.strip_suffix(".hdf5")).unwrap_or(&name).to_string();
    target.with_file_name(format!("{prefix}_rank{rank:05}.sps"))
}

fn put_str(out: &mut impl Write, s: &str) -> std::io::Result<()> {
    let b = s.as_bytes();
    let n = i32::try_from(b.len()).map_err(|_| std::io::Error::other("a name longer than 2 GiB"))?;
    out.write_all(&n.to_ne_bytes())?;
    out.write_all(b)
}

/// The file's bytes, written to `out`.
pub fn write_to(out: &mut impl Write, p: &SampleProfile, rank: i64) -> std::io::Result<()> {
    let count = |n: usize| i32::try_from(n).map_err(|_| std::io::Error::other("more than 2^31 regions or modules"));
    out.write_all(MAGIC)?;
    out.write_all(&VERSION.to_ne_bytes())?;
    out.write_all(&(rank.clamp(0, i32::MAX as i64) as i32).to_ne_bytes())?;
    out.write_all(&(p.hz.clamp(0, i32::MAX as i64) as i32).to_ne_bytes())?;
    out.write_all(&(p.ticks.min(i64::MAX as u64) as i64).to_ne_bytes())?;
    out.write_all(&count(p.regions.len())?.to_ne_bytes())?;
    for r in &p.regions {
        put_str(out, r)?;
    }
    out.write_all(&count(p.modules.len())?.to_ne_bytes())?;
    for m in &p.modules {
        put_str(out, &m.path)?;
        out.write_all(&m.base.to_ne_bytes())?;
    }
    let total: u64 = p.rows.iter().map(|r| r.count).sum();
    out.write_all(&(total as i64).to_ne_bytes())?;
    for r in &p.rows {
        let mut rec = [0u8; 16];
        rec[..4].copy_from_slice(&(r.region.clamp(-1, i32::MAX as i64) as i32).to_ne_bytes());
        rec[4..8].copy_from_slice(&(r.module.clamp(-1, i32::MAX as i64) as i32).to_ne_bytes());
        rec[8..].copy_from_slice(&r.address.to_ne_bytes());
        for _ in 0..r.count {
            out.write_all(&rec)?;
        }
    }
    Ok(())
}

fn fallback_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("TMPDIR").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(PathBuf::from("/tmp"));
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(h));
    }
    dirs
}

fn write_at(dest: &Path, p: &SampleProfile, rank: i64, mode: u32) -> std::io::Result<PathBuf> {
    let mut tmp = safe_file::TempFile::create(dest)?;
    {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, tmp.file());
        write_to(&mut out, p, rank)?;
        out.flush()?;
    }
    tmp.persist(mode)
}

/// Where the sample file went, and why not where it was meant to go (if so).
#[derive(Debug)]
pub struct WrittenSps {
    pub path: PathBuf,
    pub fallback_reason: Option<String>,
}

/// Write the sample file of rank `rank` for the profile `target`.
pub fn write(target: &Path, p: &SampleProfile, rank: i64) -> Result<WrittenSps, String> {
    let dest = path_for(target, rank);
    let first = match write_at(&dest, p, rank, safe_file::new_file_mode()) {
        Ok(path) => return Ok(WrittenSps { path, fallback_reason: None }),
        Err(e) => format!("cannot write {} ({e})", dest.display()),
    };
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let unique = format!("{}.{}_{}", std::process::id(), &safe_file::random_suffix()[..8], name);
    for d in fallback_dirs() {
        let alt = d.join(&unique);
        let mode = if safe_file::is_world_writable(&d) { 0o600 } else { safe_file::new_file_mode() };
        if let Ok(path) = write_at(&alt, p, rank, mode) {
            return Ok(WrittenSps { path, fallback_reason: Some(first) });
        }
    }
    Err(format!("{first}, and no fallback directory ($TMPDIR, /tmp, $HOME) could take it"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::samples::{SampleModule, SampleRow};

    #[test]
    fn names_and_bytes() {
        assert_eq!(path_for(Path::new("/x/run.h5"), 3), PathBuf::from("/x/run_rank00003.sps"));
        assert_eq!(path_for(Path::new("/x/run"), 12), PathBuf::from("/x/run_rank00012.sps"));
        let p = SampleProfile {
            hz: 200,
            ticks: 5,
            regions: vec!["a".into(), "bé".into()],
            modules: vec![SampleModule { path: "/bin/x".into(), base: 0x1000 }],
            rows: vec![
                SampleRow { thread: 0, region: 1, module: 0, address: 0x1234, count: 2, time_ns: 0 },
                SampleRow { thread: 0, region: -1, module: -1, address: 7, count: 1, time_ns: 0 },
            ],
            ..Default::default()
        };
        let mut b = Vec::new();
        write_to(&mut b, &p, 1).unwrap();
        let mut want = b"SCOPESMP".to_vec();
        for v in [1i32, 1, 200] {
            want.extend(v.to_ne_bytes());
        }
        want.extend(5i64.to_ne_bytes());
        want.extend(2i32.to_ne_bytes());
        want.extend(1i32.to_ne_bytes());
        want.extend(b"a");
        want.extend(3i32.to_ne_bytes());
        want.extend("bé".as_bytes());
        want.extend(1i32.to_ne_bytes());
        want.extend(6i32.to_ne_bytes());
        want.extend(b"/bin/x");
        want.extend(0x1000u64.to_ne_bytes());
        want.extend(3i64.to_ne_bytes());
        for (r, m, a) in [(1i32, 0i32, 0x1234u64), (1, 0, 0x1234), (-1, -1, 7)] {
            want.extend(r.to_ne_bytes());
            want.extend(m.to_ne_bytes());
            want.extend(a.to_ne_bytes());
        }
        assert_eq!(b, want);
    }
}
