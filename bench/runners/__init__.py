"""Worker and producer processes, one module per system; each speaks JSON lines on stdout."""
