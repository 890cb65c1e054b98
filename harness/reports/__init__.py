"""A run's reports: the terminal lines and JSON, JUnit XML, the HTML page and its error maps."""
