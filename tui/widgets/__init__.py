"""The dashboard's widgets and the pure view model they draw (`cells`, `board`, `hostlines`,
`logbuffer`, `header`). Importing this package imports nothing: the pure modules stay free of
textual so they can be tested, and reused, without it."""
