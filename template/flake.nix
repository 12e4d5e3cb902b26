{
  description = "CUDA kernel built with kernel-builder";

  inputs = {
    kernel-builder.url = "github:huggingface/kernels";
  };

  outputs =
    { self, kernel-builder, ... }:
    kernel-builder.lib.genKernelFlakeOutputs {
      inherit self;
      path = ./.;
      # Python packages the tests need beyond kernel-builder's test environment (tests/fuzz.py).
      pythonCheckInputs = pkgs: with pkgs; [ hypothesis ];
    };
}
