"""The dashboard's pure view model: what each line and cell shows, computed without textual so
it is table-tested and reused (an import contract forbids textual here)."""
