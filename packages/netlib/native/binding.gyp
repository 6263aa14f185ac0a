{
  "targets": [
    {
      "target_name": "netns",
      "sources": ["netns.c"],
      "cflags": ["-O2", "-Wall", "-Wextra"]
    }
  ]
}
