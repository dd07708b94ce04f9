//! Shares drawn as SVG bars: one bar per share, its length proportional to the share of the pool
//! (0 to 1), so that queues can be compared at a glance.

use super::html::escape;

/// Width in pixels of a bar at a share of 1 (the whole pool).
pub(crate) const FULL_WIDTH: u32 = 300;
/// Height of one bar, and the gap under it.
const BAR_HEIGHT: u32 = 14;
const GAP: u32 = 4;

/// One bar: its label, its share of the pool, its CSS class (which gives its colour).
pub(crate) struct Bar<'a> {
    /// What the bar shows, for the tooltip.
    pub label: &'a str,
    /// Share of the pool, 0 to 1 (clamped).
    pub share: f64,
    /// CSS class.
    pub class: &'a str,
}

/// The filled length in pixels of a bar at `share` (clamped to 0–1; not a number counts as 0).
pub(crate) fn length(share: f64) -> u32 {
    let s = if share.is_finite() { share.clamp(0.0, 1.0) } else { 0.0 };
    (s * f64::from(FULL_WIDTH)).round() as u32
}

/// An SVG with `bars` one under the other, each on a light track of the full width.
pub(crate) fn svg(bars: &[Bar<'_>]) -> String {
    let height = bars.len() as u32 * (BAR_HEIGHT + GAP);
    let mut out = format!(
        "<svg class=\"bars\" width=\"{FULL_WIDTH}\" height=\"{height}\" viewBox=\"0 0 {FULL_WIDTH} {height}\" role=\"img\">"
    );
    for (i, b) in bars.iter().enumerate() {
        let y = i as u32 * (BAR_HEIGHT + GAP);
        let title = escape(&format!("{}: {:.1}%", b.label, b.share * 100.0));
        out.push_str(&format!(
            "<g><title>{title}</title><rect class=\"track\" x=\"0\" y=\"{y}\" width=\"{FULL_WIDTH}\" height=\"{BAR_HEIGHT}\"/>\
             <rect class=\"{}\" x=\"0\" y=\"{y}\" width=\"{}\" height=\"{BAR_HEIGHT}\"/></g>",
            escape(b.class),
            length(b.share)
        ));
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_are_as_long_as_their_share_of_the_pool() {
        assert_eq!((length(0.0), length(0.25), length(0.75), length(1.0)), (0, 75, 225, 300));
        assert_eq!((length(-1.0), length(3.0), length(f64::NAN)), (0, 300, 0));
        let s =
            svg(&[Bar { label: "fair", share: 0.5, class: "fair" }, Bar { label: "<x>", share: 0.1, class: "actual" }]);
        assert!(s.contains("height=\"36\""), "{s}");
        assert!(s.contains("<rect class=\"fair\" x=\"0\" y=\"0\" width=\"150\""), "{s}");
        assert!(s.contains("<rect class=\"actual\" x=\"0\" y=\"18\" width=\"30\""), "{s}");
        assert!(s.contains("<title>&lt;x&gt;: 10.0%</title>"), "{s}");
    }
}
