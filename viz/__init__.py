"""Pure functions from a trace to pictures: the step-view bundle, graphs (Graphviz),
panels, captions, plots (plotly); static/step_view.js draws it in the page."""
