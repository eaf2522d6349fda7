"""The dashboard's Textual widgets: they draw the view model of `tfctl.tui.app.model`."""
