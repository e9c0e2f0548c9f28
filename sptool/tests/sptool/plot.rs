//! `sptool plot`: decode the PNGs and check size and content, not just
//! that a file appeared.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use crate::common::{ok, run_env, tempdir};
use crate::fixtures::make;

struct Image {
    width: u32,
    height: u32,
    pixels: Vec<[u8; 3]>,
}

fn decode(path: &Path) -> Image {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut decoder = png::Decoder::new(file);
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder.read_info().expect("a PNG header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("PNG data");
    let channels = info.color_type.samples();
    assert!(channels >= 3, "colour PNG expected, got {:?}", info.color_type);
    let pixels = buf[..info.buffer_size()].chunks(channels).map(|p| [p[0], p[1], p[2]]).collect();
    Image { width: info.width, height: info.height, pixels }
}

impl Image {
    fn colours(&self) -> HashSet<[u8; 3]> {
        self.pixels.iter().copied().collect()
    }

    fn non_white_fraction(&self) -> f64 {
        self.pixels.iter().filter(|p| **p != [255, 255, 255]).count() as f64 / self.pixels.len() as f64
    }

    fn count(&self, rgb: [u8; 3]) -> usize {
        self.pixels.iter().filter(|p| **p == rgb).count()
    }
}

const BLUE: [u8; 3] = [31, 119, 180];
const ORANGE: [u8; 3] = [255, 127, 14];
const GREEN: [u8; 3] = [44, 160, 44];

#[test]
fn roofline_png_and_data() {
    let dir = tempdir();
    make(dir.path(), "likwid.h5");
    ok(dir.path(), &["plot", "roofline", "likwid.h5", "-o", "roof.png", "--data", "roof.json"]);
    let img = decode(&dir.path().join("roof.png"));
    assert_eq!((img.width, img.height), (1200, 800));
    assert!(img.colours().len() > 20, "only {} colours", img.colours().len());
    let ink = img.non_white_fraction();
    assert!(ink > 0.01 && ink < 0.6, "ink fraction {ink}");
    // One marker colour per region with a point: main, matmul, memory_bound.
    for c in [BLUE, ORANGE, GREEN] {
        assert!(img.count(c) > 50, "marker colour {c:?} missing");
    }

    let data: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("roof.json")).unwrap()).unwrap();
    let points = data["points"].as_array().unwrap();
    // rank 0: main, matmul, memory_bound (setup has no metrics); rank 1:
    // memory_bound (matmul's FLOPS_DP group has no bandwidth metric).
    let ids: Vec<(u64, &str)> =
        points.iter().map(|p| (p["rank"].as_u64().unwrap(), p["region"].as_str().unwrap())).collect();
    assert_eq!(ids, [(0, "main"), (0, "matmul"), (0, "memory_bound"), (1, "memory_bound")]);
    assert_eq!(data["empirical_flops_ceiling"], true);
    assert_eq!(data["empirical_bandwidth_ceiling"], true);
    for p in points {
        let (f, b, i) = (
            p["performance_gflops"].as_f64().unwrap(),
            p["bandwidth_gbs"].as_f64().unwrap(),
            p["arithmetic_intensity_flops_per_byte"].as_f64().unwrap(),
        );
        assert!((i - f / b).abs() < 1e-12 * i.max(1.0));
        assert!(f <= data["peak_flops_gflops"].as_f64().unwrap() * (1.0 + 1e-12));
    }
    // Rates are summed over the hardware threads (MFLOP/s -> GFLOP/s).
    let mb1 = &points[3];
    let expected = (1100000.0 / 0.033 + 1050000.0 / 0.032) * 1e-6 * 1e-3;
    assert!((mb1["performance_gflops"].as_f64().unwrap() - expected).abs() < 1e-9);
    assert!(data["roofline"].as_array().unwrap().len() >= 100);
}

#[test]
fn roofline_given_ceilings_and_metric_names() {
    let dir = tempdir();
    make(dir.path(), "likwid.h5");
    ok(
        dir.path(),
        &[
            "plot", "roofline", "likwid.h5", "-o", "roof.svg", "--data", "roof.json",
            "--peak-flops", "3000", "--peak-bandwidth", "200",
            "--flops-metric", "DP [MFLOP/s]", "--bandwidth-metric", "Memory bandwidth [MBytes/s]",
            "--ranks", "0",
        ],
    );
    let data: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("roof.json")).unwrap()).unwrap();
    assert_eq!(data["empirical_flops_ceiling"], false);
    assert_eq!(data["peak_flops_gflops"], 3000.0);
    assert!((data["ridge_point_flops_per_byte"].as_f64().unwrap() - 15.0).abs() < 1e-12);
    assert_eq!(data["points"].as_array().unwrap().len(), 3);
    let svg = std::fs::read_to_string(dir.path().join("roof.svg")).unwrap();
    assert!(svg.starts_with("<svg"));
    assert!(svg.contains("matmul") && svg.contains("memory_bound"));
    assert!(svg.contains("<circle"), "no points drawn");
    assert!(svg.contains("compute ceiling 3000 GFLOP/s"), "ceiling not labelled");
    assert!(!svg.contains("empirical"), "given ceilings are not empirical");
}

#[test]
fn empirical_ceilings_are_labelled() {
    let dir = tempdir();
    make(dir.path(), "likwid.h5");
    ok(dir.path(), &["plot", "roofline", "likwid.h5", "-o", "roof.svg"]);
    let svg = std::fs::read_to_string(dir.path().join("roof.svg")).unwrap();
    assert!(svg.contains("empirical"), "empirical ceilings must be labelled as such");
}

#[test]
fn regions_png() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    ok(dir.path(), &["plot", "regions", "timings.h5", "-o", "regions.png", "--width", "1000", "--height", "600"]);
    let img = decode(&dir.path().join("regions.png"));
    assert_eq!((img.width, img.height), (1000, 600));
    assert!(img.colours().len() > 10);
    // One bar colour per rank; rank 0 (blue) has the most area.
    let rank_colours = [BLUE, ORANGE, GREEN, [214, 39, 40]];
    for c in rank_colours {
        assert!(img.count(c) > 200, "rank colour {c:?} missing");
    }
    let ink = img.non_white_fraction();
    assert!(ink > 0.05 && ink < 0.8, "ink fraction {ink}");
}

#[test]
fn regions_svg_names() {
    let dir = tempdir();
    make(dir.path(), "timings.h5");
    ok(dir.path(), &["plot", "regions", "timings.h5", "-o", "regions.svg", "--top", "2"]);
    let svg = std::fs::read_to_string(dir.path().join("regions.svg")).unwrap();
    let texts: Vec<&str> = svg.lines().map(str::trim).collect();
    assert!(texts.contains(&"main") && texts.contains(&"solve"), "region names not drawn");
    assert!(!svg.contains("io/write"), "--top 2 keeps the two costliest");
    assert!(svg.contains("rank 3"));
}

#[test]
fn without_a_font_the_plot_is_drawn_without_text() {
    let dir = tempdir();
    make(dir.path(), "likwid.h5");
    for out in ["roof.png", "roof.svg"] {
        let r = run_env(dir.path(), &["plot", "roofline", "likwid.h5", "-o", out], &[("SPTOOL_FONT", "none")]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let img = decode(&dir.path().join("roof.png"));
    assert!(img.count(BLUE) > 50 && img.non_white_fraction() > 0.003);
    let svg = std::fs::read_to_string(dir.path().join("roof.svg")).unwrap();
    assert!(!svg.contains("<text"));
    let r = run_env(dir.path(), &["plot", "regions", "likwid.h5", "-o", "r.png"], &[("SPTOOL_FONT", "/nonexistent.ttf")]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("not a readable TrueType font"), "{}", r.stderr);
}
