//! The SVG chart of `storage-compare`: for each dataset, one stacked bar per strategy of
//! its bytes per document by component (`plotters`, SVG backend only).

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// `(dataset, [(strategy, [(component, bytes per document)])])`.
type Panel = (String, Vec<(String, Vec<(String, f64)>)>);

/// What the chart shows.
pub(crate) struct ChartData {
    panels: Vec<Panel>,
}

/// Component colors, in the order of `storage_compare::COMPONENTS`; the id/dedup
/// structures (bloom, id index) in warm colors.
const COLORS: [RGBColor; 8] = [
    RGBColor(0x4c, 0x72, 0xb0), // series table
    RGBColor(0x55, 0xa8, 0x68), // timestamps
    RGBColor(0x81, 0x72, 0xb2), // metrics
    RGBColor(0x64, 0xb5, 0xcd), // extras
    RGBColor(0x8c, 0x8c, 0x8c), // directory
    RGBColor(0xdd, 0x84, 0x52), // bloom
    RGBColor(0xc4, 0x4e, 0x52), // id index
    RGBColor(0xcc, 0xb9, 0x74), // other
];

impl ChartData {
    pub(crate) fn from_results(panels: Vec<Panel>) -> ChartData {
        ChartData { panels }
    }

    /// The chart as SVG text.
    pub(crate) fn render(&self, date: &str) -> Result<String> {
        let err = |e: &dyn std::fmt::Debug| anyhow!("drawing the chart: {e:?}");
        let n = self.panels.len().max(1) as u32;
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (330 * n + 150, 460)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| err(&e))?;
            let root = root
                .titled(
                    &format!(
                        "Bytes per document by component after merge (storage-compare, {date})"
                    ),
                    ("sans-serif", 17),
                )
                .map_err(|e| err(&e))?;
            let (panels, legend) = root.split_horizontally(330 * n);
            let areas = panels.split_evenly((1, n as usize));
            self.draw_legend(&legend).map_err(|e| err(&e))?;
            for ((dataset, strategies), area) in self.panels.iter().zip(&areas) {
                let names: Vec<String> = strategies.iter().map(|s| s.0.clone()).collect();
                let top = strategies
                    .iter()
                    .map(|s| s.1.iter().map(|c| c.1).sum::<f64>())
                    .fold(0.0f64, f64::max)
                    .max(0.1)
                    * 1.15;
                let k = strategies.len().max(1) as f64;
                let mut chart = ChartBuilder::on(area)
                    .caption(dataset, ("sans-serif", 16))
                    .margin(12)
                    .x_label_area_size(28)
                    .y_label_area_size(48)
                    .build_cartesian_2d(-0.5f64..(k - 0.5), 0f64..top)
                    .map_err(|e| err(&e))?;
                let formatter = |x: &f64| {
                    let i = x.round();
                    if (x - i).abs() < 1e-6 && i >= 0.0 {
                        names.get(i as usize).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                };
                chart
                    .configure_mesh()
                    .disable_x_mesh()
                    .x_labels(strategies.len())
                    .x_label_formatter(&formatter)
                    .y_desc("bytes / document")
                    .draw()
                    .map_err(|e| err(&e))?;
                let components: Vec<String> = strategies
                    .first()
                    .map(|s| s.1.iter().map(|c| c.0.clone()).collect())
                    .unwrap_or_default();
                for c in 0..components.len() {
                    let color = COLORS.get(c).copied().unwrap_or(BLACK);
                    let shown = strategies
                        .iter()
                        .any(|s| s.1.get(c).is_some_and(|v| v.1 > 0.0));
                    let bars = strategies.iter().enumerate().map(|(i, s)| {
                        let below: f64 = s.1.iter().take(c).map(|v| v.1).sum();
                        let here = s.1.get(c).map_or(0.0, |v| v.1);
                        let x = i as f64;
                        Rectangle::new(
                            [(x - 0.32, below), (x + 0.32, below + here)],
                            color.filled(),
                        )
                    });
                    if shown {
                        chart.draw_series(bars).map_err(|e| err(&e))?;
                    }
                }
                // Totals above the bars.
                let totals = strategies.iter().enumerate().map(|(i, s)| {
                    let total: f64 = s.1.iter().map(|v| v.1).sum();
                    Text::new(
                        format!("{total:.2}"),
                        (i as f64 - 0.2, total + top * 0.06),
                        ("sans-serif", 12),
                    )
                });
                chart.draw_series(totals).map_err(|e| err(&e))?;
            }
            root.present().map_err(|e| err(&e))?;
        }
        Ok(svg)
    }

    /// The components present in any bar, with their colors, top to bottom as stacked.
    fn draw_legend<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, plotters::coord::Shift>,
    ) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let components: Vec<&str> = self
            .panels
            .first()
            .and_then(|p| p.1.first())
            .map(|s| s.1.iter().map(|c| c.0.as_str()).collect())
            .unwrap_or_default();
        let shown: Vec<(usize, &str)> = components
            .into_iter()
            .enumerate()
            .filter(|(c, _)| {
                self.panels
                    .iter()
                    .flat_map(|p| &p.1)
                    .any(|s| s.1.get(*c).is_some_and(|v| v.1 > 0.0))
            })
            .collect();
        for (row, (c, name)) in shown.iter().rev().enumerate() {
            let y = 70 + 22 * row as i32;
            let color = COLORS.get(*c).copied().unwrap_or(BLACK);
            area.draw(&Rectangle::new([(8, y), (22, y + 14)], color.filled()))?;
            area.draw(&Text::new(
                name.replace('_', " "),
                (28, y + 1),
                ("sans-serif", 13),
            ))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_an_svg_with_every_dataset_and_strategy() {
        let bar = |x: f64| {
            vec![
                ("series_table".to_owned(), 0.5),
                ("timestamps".to_owned(), 1.0),
                ("id_index".to_owned(), x),
            ]
        };
        let data = ChartData::from_results(vec![(
            "otel".into(),
            vec![
                ("inverted".into(), bar(4.0)),
                ("series-range".into(), bar(0.0)),
            ],
        )]);
        let svg = data.render("2026-11-30").unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..60.min(svg.len())]);
        for needle in [
            "otel",
            "inverted",
            "series-range",
            "id index",
            "5.50",
            "<rect",
        ] {
            assert!(svg.contains(needle), "{needle}");
        }
    }
}
