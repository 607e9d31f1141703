"""The Gradio page: layout, handlers wiring widgets to the engine and viz, per-session
state, presets. Wiring only."""
