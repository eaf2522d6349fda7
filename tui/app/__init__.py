"""The Textual dashboard: the app, its actions and workers, the messages they post, the pure view
model (`model/`, no textual) and the widgets that draw it (`widgets/`)."""
