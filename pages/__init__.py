"""The app's pages; `common` holds what every page shares."""
