//! Samples to source lines: every sampled address resolved once through the shared
//! symbolizer (DWARF line tables and symbol tables of the modules, in-process), then counted
//! per region, function and file, line by line: the `line_profile` records.

use crate::model::samples::{LINE_UNIT, LineRecord, OUTSIDE_REGIONS, SampleProfile};
use crate::symbols::{Place, Symbolizer, fallback_name, own_module_path};
use std::collections::{BTreeMap, HashMap};

const UNKNOWN: &str = "??";
/// The function of samples taken inside this library.
pub const OWN_CODE: &str = "(scope_profiler)";

#[derive(Default)]
struct Lines {
    /// line -> (samples, ns)
    by_line: BTreeMap<i64, (u64, u64)>,
    total: u64,
    /// Where the function starts, if the symbol says.
    start: Option<i64>,
}

/// The `line_profile` records of `p` (its rows and modules), hottest function first within
/// each region, regions in id order and the samples outside every region last.
pub fn lines(p: &SampleProfile) -> Vec<LineRecord> {
    let mut symbolizer = Symbolizer::new();
    let own = own_module_path();
    let mut places: HashMap<(i64, u64), (Place, Option<(String, u32)>)> = HashMap::new();
    // (region, function, file) -> lines
    let mut groups: BTreeMap<(i64, String, String), Lines> = BTreeMap::new();
    for row in &p.rows {
        let (place, start) = places
            .entry((row.module, row.address))
            .or_insert_with(|| match usize::try_from(row.module).ok().and_then(|m| p.modules.get(m)) {
                Some(m) => {
                    let place = symbolizer.resolve(&m.path, m.base, row.address);
                    let start = if place.file.is_some() { symbolizer.function_start(&m.path, m.base, row.address) } else { None };
                    (place, start)
                }
                None => (Place::default(), None),
            })
            .clone();
        let module = usize::try_from(row.module).ok().and_then(|m| p.modules.get(m));
        // Samples inside this library are ours, not the program's code (whatever region is open).
        let ours = module.is_some_and(|m| own.as_deref() == Some(m.path.as_str()))
            || place.function.as_deref().is_some_and(|f| f.starts_with("scope_profiler::") || f.starts_with("<scope_profiler::"));
        // Without a symbol whose range holds the address: the module and the offset, never
        // a neighbouring function's name.
        let function = if ours {
            OWN_CODE.to_string()
        } else {
            place.function.clone().unwrap_or_else(|| module.map_or_else(|| UNKNOWN.into(), |m| fallback_name(&m.path, m.base, row.address)))
        };
        let file = if ours { UNKNOWN.into() } else { place.file.clone().unwrap_or_else(|| UNKNOWN.into()) };
        let line = if place.file.is_some() && !ours { place.line as i64 } else { 0 };
        let g = groups.entry((row.region, function, file.clone())).or_default();
        let e = g.by_line.entry(line).or_insert((0, 0));
        e.0 += row.count;
        e.1 = e.1.saturating_add(row.time_ns);
        g.total += row.count;
        if let Some((f, l)) = start {
            if f == file {
                g.start = Some(g.start.map_or(l as i64, |s: i64| s.min(l as i64)));
            }
        }
    }
    let mut records: Vec<(i64, u64, LineRecord)> = groups
        .into_iter()
        .map(|((region, function, filename), g)| {
            let first_sampled = g.by_line.keys().next().copied().unwrap_or(0);
            let first_lineno = match g.start {
                Some(s) if s > 0 && s <= first_sampled => s,
                _ => first_sampled,
            };
            let outside = region < 0;
            let name = if outside { OUTSIDE_REGIONS.to_string() } else { p.regions.get(region as usize).cloned().unwrap_or_else(|| format!("#{region}")) };
            let record = LineRecord {
                region: name,
                outside,
                filename,
                function,
                first_lineno,
                line_numbers: g.by_line.keys().copied().collect(),
                hits: g.by_line.values().map(|v| v.0 as i64).collect(),
                times: g.by_line.values().map(|v| v.1 as f64 / (LINE_UNIT * 1e9)).collect(),
            };
            (if outside { i64::MAX } else { region }, g.total, record)
        })
        .collect();
    records.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then_with(|| a.2.function.cmp(&b.2.function)));
    records.into_iter().map(|(_, _, r)| r).collect()
}
