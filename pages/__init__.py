"""The app's pages; `shared` (a subfolder, never a page) holds what every page shares."""
