"""The Textual dashboard without a lab: Pilot over the fakes, its view model, snapshots."""
