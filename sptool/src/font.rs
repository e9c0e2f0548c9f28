//! A TrueType font for the text in plots. plotters (with `ab_glyph`) draws
//! only with fonts registered at run time; sptool registers the first one
//! it finds and otherwise draws plots without text.

use std::sync::OnceLock;

use plotters::style::FontStyle;

/// Where Linux distributions put a sans-serif font (DejaVu first: Debian
/// and Ubuntu `fonts-dejavu-core`, Fedora `dejavu-sans-fonts`, Arch
/// `ttf-dejavu`; then Liberation, Noto and FreeFont).
const CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/google-noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/usr/share/fonts/gnu-free/FreeSans.ttf",
];

fn try_register(path: &str) -> bool {
    // A font named by SPTOOL_FONT is read only if it is a regular file (a FIFO never blocks us).
    let Ok(bytes) = safe_file::read_regular(std::path::Path::new(path), 64 << 20) else { return false };
    // plotters keeps a `&'static` reference; the font lives as long as the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok()
}

/// Register a font once. `SPTOOL_FONT=/path/font.ttf` chooses one;
/// `SPTOOL_FONT=none` turns text off. Returns whether text can be drawn.
pub fn available() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let chosen = std::env::var("SPTOOL_FONT").ok().filter(|s| !s.is_empty());
        let found = match chosen.as_deref() {
            Some("none") => return false,
            Some(path) => {
                try_register(path) || {
                    eprintln!("sptool: warning: SPTOOL_FONT={path} is not a readable TrueType font");
                    CANDIDATES.iter().any(|p| try_register(p))
                }
            }
            None => CANDIDATES.iter().any(|p| try_register(p)),
        };
        if !found {
            eprintln!(
                "sptool: warning: no TrueType font found (install fonts-dejavu-core or set \
                 SPTOOL_FONT=/path/to/font.ttf); the plot is drawn without text"
            );
        }
        found
    })
}
