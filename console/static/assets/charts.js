// Line charts over time with uPlot (vendored: assets/vendor/uplot, MIT),
// loaded by index.html as the global uPlot.

const axisFmt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 3 });

// axisNum labels a y-axis tick with at most 3 significant digits, so that
// small steps (0.025 s) do not all print as "0.0".
function axisNum(v) {
  return v === null || v === undefined ? '' : axisFmt.format(Number(v.toPrecision(3)));
}

const COLORS = ['#1f6feb', '#d97706', '#1a7f37', '#8250df', '#cf222e', '#0e7490'];

/**
 * timeChart draws a chart into el. spec: {title, unit (shown on the y
 * axis), series: [{key, label}], fmt(v) for values, integer (whole-number
 * axis steps)}. It returns
 * {update(history)}, which redraws from History.columns.
 */
export function timeChart(el, spec) {
  const fmt = spec.fmt || ((v) => String(v));
  const opts = {
    title: spec.title,
    width: Math.max(el.clientWidth, 300),
    height: 200,
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
    series: [
      { value: (u, v) => (v === null ? '—' : new Date(v * 1000).toLocaleTimeString()) },
      ...spec.series.map((s, i) => ({
        label: s.label,
        stroke: COLORS[i % COLORS.length],
        width: 2,
        points: { show: false },
        value: (u, v) => (v === null || v === undefined ? '—' : fmt(v)),
      })),
    ],
    axes: [
      { stroke: '#6b7686', grid: { stroke: '#eef1f4' } },
      {
        stroke: '#6b7686', grid: { stroke: '#eef1f4' }, size: 64, label: spec.unit, labelSize: 18,
        values: (u, vals) => vals.map(axisNum),
      },
    ],
    legend: { live: true },
  };
  if (spec.integer) opts.axes[1].incrs = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 1e7, 1e8];
  const empty = [[], ...spec.series.map(() => [])];
  const plot = new uPlot(opts, empty, el);
  const ro = new ResizeObserver(() => {
    if (el.clientWidth > 0) plot.setSize({ width: el.clientWidth, height: 200 });
  });
  ro.observe(el);
  const keys = spec.series.map((s) => s.key);
  return {
    update(history) {
      plot.setData(history.columns(keys));
    },
    destroy() {
      ro.disconnect();
      plot.destroy();
    },
  };
}
