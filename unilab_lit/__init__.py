"""unilab_lit: Lightning-native asynchronous RL on batched MuJoCo."""
