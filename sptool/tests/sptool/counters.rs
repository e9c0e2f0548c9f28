//! perf events and FLOP/byte annotations: `rank<N>/perf_events` (as the library writes it,
//! and as the Python package writes it: no `tag`, no `running_fraction`) and
//! `rank<N>/annotations`, shown by inspect, carried by export, placed by plot roofline.

use serde_json::Value;

use crate::common::{ok, tempdir};
use crate::fixtures::metadata;
use crate::writer::{Rank, Region, Schema1Writer, Val, write_attr};

fn make(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("counters.h5");
    let w = Schema1Writer::create(&path, &metadata(2)).unwrap();
    for r in 0..2u32 {
        w.rank(&Rank {
            rank: r,
            attrs: vec![("num_threads".into(), Val::I(1))],
            regions: vec![
                Region::from_durations("matmul", 1_000_000, &[2_000_000_000]),
                Region::from_durations("io/write", 5_000_000_000, &[1_000_000]),
            ],
            likwid: None,
        })
        .unwrap();
    }
    drop(w);
    let f = hdf5::File::open_rw(&path).unwrap();
    for r in 0..2u32 {
        let g = f.group(&format!("rank{r}")).unwrap();
        let p = g.create_group("perf_events").unwrap();
        // The library's layout (tag, running fraction, counted FLOPs) for matmul; the
        // Python package's for io/write (group name as given, no extras).
        let m = p.create_group("matmul").unwrap();
        write_attr(&m, "tag", &Val::S("matmul".into())).unwrap();
        write_attr(&m, "calls", &Val::I(1)).unwrap();
        write_attr(&m, "event_names", &Val::SA(vec!["task-clock".into(), "RETIRED_SSE_AVX_FLOPS.ALL".into()])).unwrap();
        m.new_dataset::<u64>().shape(2).create("values").unwrap().write_raw(&[1_900_000_000u64, 5_000_000_000]).unwrap();
        m.new_dataset::<f64>().shape(2).create("running_fraction").unwrap().write_raw(&[0.5, 0.5]).unwrap();
        write_attr(&m, "counted_flops", &Val::F(5e9)).unwrap();
        let io = p.create_group("io|write").unwrap();
        write_attr(&io, "calls", &Val::I(1)).unwrap();
        write_attr(&io, "event_names", &Val::SA(vec!["task-clock".into()])).unwrap();
        io.new_dataset::<u64>().shape(1).create("values").unwrap().write_raw(&[900_000u64]).unwrap();
        let a = g.create_group("annotations").unwrap().create_group("matmul").unwrap();
        write_attr(&a, "tag", &Val::S("matmul".into())).unwrap();
        write_attr(&a, "flops", &Val::F(4e9 * (r + 1) as f64)).unwrap();
        write_attr(&a, "bytes", &Val::F(1e9)).unwrap();
    }
    path
}

#[test]
fn inspect_shows_perf_tables_and_rates() {
    let dir = tempdir();
    make(dir.path());
    let out = ok(dir.path(), &["inspect", "counters.h5"]);
    assert!(out.contains("perf events (rank 0)") && out.contains("perf events (rank 1)"), "{out}");
    let header = out.lines().find(|l| l.trim_start().starts_with("event ")).unwrap();
    assert_eq!(header.split_whitespace().collect::<Vec<_>>(), ["event", "io/write", "matmul"]);
    assert!(out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["task-clock", "900000", "1900000000"]), "{out}");
    assert!(out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["running", "fraction", "-", "0.500"]), "{out}");
    // matmul on rank 0: 4 GFLOP and 1 GB in 2 s; counted 5 GFLOP; on rank 1 8 GFLOP.
    let row = |rank: &str| -> Vec<String> {
        out.lines()
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .find(|c| c.len() == 10 && c[0] == "matmul" && c[1] == rank)
            .unwrap_or_else(|| panic!("no matmul row for rank {rank}:\n{out}"))
    };
    assert_eq!(row("0")[3..], ["4", "2", "1", "0.5", "4", "2.5", "0.8"]);
    assert_eq!(row("1")[3..], ["8", "4", "1", "0.5", "8", "2.5", "1.6"]);
}

#[test]
fn export_carries_flops_bytes_rates_and_event_totals() {
    let dir = tempdir();
    make(dir.path());
    ok(dir.path(), &["export", "counters.h5", "--format", "json", "-o", "out.json"]);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap()).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    let find = |rank: u64, region: &str| rows.iter().find(|r| r["rank"] == rank && r["region"] == region).unwrap();
    let m = find(1, "matmul");
    assert_eq!(m["flops"], 8e9);
    assert_eq!(m["bytes"], 1e9);
    assert_eq!(m["gflops_per_s"], 4.0);
    assert_eq!(m["counted_flops"], 5e9);
    assert_eq!(m["task-clock"], 1.9e9);
    assert_eq!(m["RETIRED_SSE_AVX_FLOPS.ALL"], 5e9);
    let io = find(0, "io/write");
    assert_eq!(io["task-clock"], 900000.0);
    assert!(io["flops"].is_null());
    ok(dir.path(), &["export", "counters.h5", "--format", "csv", "-o", "out.csv"]);
    let csv = std::fs::read_to_string(dir.path().join("out.csv")).unwrap();
    let header = csv.lines().next().unwrap();
    assert!(header.ends_with("flops,bytes,gflops_per_s,counted_flops,task-clock,RETIRED_SSE_AVX_FLOPS.ALL"), "{header}");
}

#[test]
fn roofline_places_annotated_regions() {
    let dir = tempdir();
    make(dir.path());
    ok(dir.path(), &["plot", "roofline", "counters.h5", "-o", "roof.svg", "--data", "roof.json"]);
    let data: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("roof.json")).unwrap()).unwrap();
    let points = data["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{data}");
    assert_eq!(points[1]["region"], "matmul");
    assert_eq!(points[1]["group"], "annotations");
    assert_eq!(points[1]["performance_gflops"], 4.0);
    assert_eq!(points[1]["bandwidth_gbs"], 0.5);
    assert_eq!(points[1]["arithmetic_intensity_flops_per_byte"], 8.0);
}

/// Many regions and few events (LULESH's 27 per-element regions with 2 events): the perf table
/// turns, regions as rows and events as columns, so its width is that of the events.
#[test]
fn inspect_turns_the_perf_table_when_regions_outnumber_events() {
    let dir = tempdir();
    let path = dir.path().join("many.h5");
    let names: Vec<String> = (0..27).map(|i| format!("CalcElemStep{i:02}")).collect();
    let w = Schema1Writer::create(&path, &metadata(1)).unwrap();
    w.rank(&Rank {
        rank: 0,
        attrs: vec![("num_threads".into(), Val::I(1))],
        regions: names.iter().map(|n| Region::from_durations(n, 1_000, &[1_000])).collect(),
        likwid: None,
    })
    .unwrap();
    drop(w);
    {
        let f = hdf5::File::open_rw(&path).unwrap();
        let p = f.group("rank0").unwrap().create_group("perf_events").unwrap();
        for (i, n) in names.iter().enumerate() {
            let g = p.create_group(n).unwrap();
            write_attr(&g, "tag", &Val::S(n.clone())).unwrap();
            write_attr(&g, "calls", &Val::I(10)).unwrap();
            write_attr(&g, "event_names", &Val::SA(vec!["task-clock".into(), "page-faults".into()])).unwrap();
            g.new_dataset::<u64>().shape(2).create("values").unwrap().write_raw(&[1000 + i as u64, i as u64]).unwrap();
        }
    }
    let out = ok(dir.path(), &["inspect", "many.h5"]);
    let table: Vec<&str> = out.lines().skip_while(|l| !l.starts_with("perf events (rank 0)")).skip(1).take_while(|l| !l.trim().is_empty()).collect();
    let header = table.iter().find(|l| l.trim_start().starts_with("region ")).unwrap_or_else(|| panic!("no turned table:\n{out}"));
    assert_eq!(header.split_whitespace().collect::<Vec<_>>(), ["region", "calls", "task-clock", "page-faults"]);
    for (i, n) in names.iter().enumerate() {
        let row = format!("{n} 10 {} {i}", 1000 + i);
        assert!(table.iter().any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == row), "no row {row:?}:\n{out}");
    }
    let widest = table.iter().map(|l| l.chars().count()).max().unwrap();
    assert!(widest < 100, "the table is {widest} columns wide:\n{out}");
}
