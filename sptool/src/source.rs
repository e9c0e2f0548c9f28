//! Where each region is defined in the program's source, when the file says: the
//! `source_file`/`source_lineno` attributes of a region group (schema 1) or the
//! `rank_region_index/source_files`/`source_lines` columns (schemas 2 and 3). The first
//! location seen for a region name is kept.

use std::collections::BTreeMap;

use crate::h5util::Group;
use crate::model::SourceLocation;

/// Every region's location, by region name. Unreadable or absent entries are skipped: a
/// location is a hint, never a reason to refuse a file.
pub fn read(file: &Group, schema: i64, ranks: &[(u32, String)]) -> BTreeMap<String, SourceLocation> {
    let mut out = BTreeMap::new();
    if schema == 1 {
        for (_, rank) in ranks {
            let Ok(regions) = file.group(&format!("{rank}/regions")) else { continue };
            for member in regions.subgroups().unwrap_or_default() {
                let Ok(g) = regions.member(&member) else { continue };
                let Some(path) = g.attr_string("source_file").filter(|f| !f.is_empty()) else { continue };
                let name = g.attr_string("tag").unwrap_or_else(|| member.name.replace('|', "/"));
                let line = g.attr_i64("source_lineno").filter(|&l| l >= 0);
                out.entry(name).or_insert(SourceLocation { file: path, line });
            }
        }
        return out;
    }
    let (Ok(table), Ok(index)) = (file.group("region_table"), file.group("rank_region_index")) else { return out };
    if !index.has("source_files") {
        return out;
    }
    let (Ok(names), Ok(ids), Ok(files)) = (table.read_strings("names"), index.read_i64("region_ids"), index.read_strings("source_files")) else {
        return out;
    };
    let lines = index.read_i64("source_lines").unwrap_or_default();
    for (row, path) in files.into_iter().enumerate() {
        let name = ids.get(row).and_then(|&id| usize::try_from(id).ok()).and_then(|i| names.get(i));
        if let (Some(name), false) = (name, path.is_empty()) {
            let line = lines.get(row).copied().filter(|&l| l >= 0);
            out.entry(name.clone()).or_insert(SourceLocation { file: path, line });
        }
    }
    out
}
