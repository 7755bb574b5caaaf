//! A Gantt chart of a simulated iteration as SVG.
